package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	flockd "flockd/clients/go"
)

func main() {
	url := os.Getenv("FLOCKD_URL")
	if url == "" {
		url = "redis://127.0.0.1:6390" // flockd's default address
	}
	client, err := flockd.NewClient([]string{url})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := client.Acquire(context.Background(), "orders:42",
		flockd.Options{Lease: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if lock == nil {
		log.Fatal("busy: not granted within 5 s")
	}
	fmt.Println("acquired orders:42 with token", lock.Token)

	// Work under lock.Context(): it is cancelled if the lock is lost.
	select {
	case <-lock.Context().Done():
		log.Fatal(lock.Err())
	case <-time.After(100 * time.Millisecond):
	}
	stored, err := lock.FenceSet("res:orders:42", fmt.Sprint("written by token ", lock.Token))
	if err != nil {
		log.Fatal(err) // flockd.ErrLost: nothing was sent
	}
	fmt.Println("stored:", stored) // false: a newer holder wrote, or this holding is gone

	freed, err := lock.Release()
	fmt.Println("released:", freed, err)
}
