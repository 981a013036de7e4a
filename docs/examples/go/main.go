// A fenced worker for flockd with go-redis (github.com/redis/go-redis/v9): acquire a lock
// (waiting in line if it is held), do the work guarded by the fencing token, release.
//
//	FLOCKD_ADDR=127.0.0.1:6390 go run .
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	lock     = "orders:42"
	resource = "res:orders:42"
	leaseMs  = 10_000
	waitMs   = 5_000
)

func main() {
	addr := os.Getenv("FLOCKD_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6390"
	}
	// The read timeout must exceed WAIT, or the client gives up on a blocked acquire.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: waitMs*time.Millisecond + 5*time.Second})
	ctx := context.Background()

	token, err := rdb.Do(ctx, "FLOCK.ACQUIRE", lock, leaseMs, "WAIT", waitMs).Int64()
	if errors.Is(err, redis.Nil) {
		log.Fatal("lock busy, giving up")
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acquired %s with token %d\n", lock, token)
	defer func() {
		// NOTOWNER here means the lease ran out (or an admin force-released) while we worked.
		if err := rdb.Do(ctx, "FLOCK.RELEASE", lock, token).Err(); err != nil {
			log.Printf("release failed: %v", err)
		}
	}()

	stored, err := rdb.Do(ctx, "FENCE.SET", resource, token, fmt.Sprintf("written by token %d", token)).Int64()
	if err != nil {
		log.Fatal(err)
	}
	if stored != 1 {
		log.Print("fenced out: a newer holder exists, stopping")
		return
	}
	// Long work: extend the lease before it runs out.
	if err := rdb.Do(ctx, "FLOCK.RENEW", lock, token, leaseMs).Err(); err != nil {
		log.Printf("lost the lock: %v", err)
		return
	}
	value, _ := rdb.Do(ctx, "FENCE.GET", resource).Text()
	fmt.Println("stored:", value)
}
