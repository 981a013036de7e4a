// A fenced worker for flockd with redigo (github.com/gomodule/redigo/redis; Debian:
// golang-github-gomodule-redigo-dev): acquire a lock (waiting in line if it is held), do the
// work guarded by the fencing token, release. Exits non-zero on anything unexpected.
//
//	FLOCKD_URL=redis://127.0.0.1:6390 GO111MODULE=off GOPATH=/usr/share/gocode go run main.go
package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gomodule/redigo/redis"
)

const (
	lock     = "orders:42"
	resource = "res:orders:42"
	leaseMs  = 10_000
	waitMs   = 5_000
)

func main() { os.Exit(run()) }

func run() int {
	url := os.Getenv("FLOCKD_URL")
	if url == "" {
		url = "redis://127.0.0.1:6390"
	}
	// A read timeout for ordinary commands; the blocking acquire gets its own, longer one below.
	// On a timeout redigo closes the connection (it never retries), and flockd drops a waiter
	// whose connection closed.
	conn, err := redis.DialURL(url,
		redis.DialConnectTimeout(5*time.Second),
		redis.DialReadTimeout(5*time.Second),
		redis.DialWriteTimeout(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	defer conn.Close()

	// The read timeout of a blocking acquire must exceed WAIT, or the client gives up first.
	token, err := redis.Int64(redis.DoWithTimeout(conn, waitMs*time.Millisecond+5*time.Second,
		"FLOCK.ACQUIRE", lock, leaseMs, "WAIT", waitMs))
	if errors.Is(err, redis.ErrNil) {
		fmt.Println("lock busy, giving up")
		return 1
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "acquire:", err)
		return 1
	}
	fmt.Printf("acquired %s with token %d\n", lock, token)

	code := work(conn, token)

	// Release whatever happened; NOTOWNER here means the lease ran out (or an admin
	// force-released) while we worked.
	free, err := redis.Int64(conn.Do("FLOCK.RELEASE", lock, token))
	if err != nil {
		fmt.Println("release failed:", err)
		if code == 0 {
			code = 3
		}
	} else {
		fmt.Printf("released (free=%d)\n", free)
	}
	return code
}

func work(conn redis.Conn, token int64) int {
	value := fmt.Sprintf("written by token %d", token)
	// Every write to the protected resource carries the token. 0 = a newer holder wrote
	// already: we lost the lock and must stop.
	stored, err := redis.Int64(conn.Do("FENCE.SET", resource, token, value))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence.set:", err)
		return 1
	}
	if stored != 1 {
		fmt.Println("fenced out: a newer holder exists, stopping")
		return 2
	}
	// Long work: extend the lease before it runs out (NOTOWNER if it already did).
	if _, err := redis.Int64(conn.Do("FLOCK.RENEW", lock, token, leaseMs)); err != nil {
		fmt.Println("lost the lock:", err)
		return 2
	}
	got, err := redis.String(conn.Do("FENCE.GET", resource))
	if err != nil || got != value {
		fmt.Fprintf(os.Stderr, "fenced register: got %q, %v; want %q\n", got, err, value)
		return 1
	}
	fmt.Println("stored:", got)
	return 0
}
