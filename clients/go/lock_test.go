package flockd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

func newClient(t *testing.T, nodes ...*server) *Client {
	t.Helper()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	c, err := NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func acquire(t *testing.T, c *Client, name string, opts Options) *Lock {
	t.Helper()
	lock, err := c.Acquire(context.Background(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if lock == nil {
		t.Fatalf("%s was not granted", name)
	}
	return lock
}

// waitLost waits up to `limit` for Lost and returns when it fired.
func waitLost(t *testing.T, lock *Lock, limit time.Duration) time.Time {
	t.Helper()
	select {
	case <-lock.Lost():
		return time.Now()
	case <-time.After(limit):
		t.Fatalf("Lost did not fire within %v", limit)
	}
	return time.Time{}
}

func lostReason(t *testing.T, lock *Lock) Reason {
	t.Helper()
	var lost *LostError
	if err := lock.Err(); !errors.As(err, &lost) {
		t.Fatalf("Err() = %v, want a *LostError", err)
	}
	return lost.Reason
}

func TestGrantAndToken(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	lock := acquire(t, newClient(t, s), "orders:1", Options{Lease: 10 * time.Second})
	last, _ := redis.Int64(admin.Do("FLOCK.TOKEN", "orders:1"))
	if lock.Token <= 0 || lock.Token != last {
		t.Fatalf("token %d, FLOCK.TOKEN %d", lock.Token, last)
	}
	st := status(t, admin, "orders:1")
	if held, _ := redis.Int64(st["token"], nil); held != lock.Token {
		t.Fatalf("FLOCK.STATUS token %v, want %d", st["token"], lock.Token)
	}
	if lock.Err() != nil {
		t.Fatalf("Err() = %v on a held lock", lock.Err())
	}
	// Held: a second acquire without a wait is not granted, and that is no error.
	other, err := newClient(t, s).Acquire(context.Background(), "orders:1", Options{})
	if other != nil || err != nil {
		t.Fatalf("second acquire: %v, %v; want nil, nil", other, err)
	}
	free, err := lock.Release()
	if err != nil || !free {
		t.Fatalf("Release: %v, %v", free, err)
	}
	if ttl, _ := redis.Int64(admin.Do("FLOCK.TTL", "orders:1")); ttl != -2 {
		t.Fatalf("FLOCK.TTL after release: %d", ttl)
	}
	select {
	case <-lock.Lost():
		t.Fatal("Lost fired on a release")
	case <-lock.Context().Done():
	}
}

func TestASecondClientWaitsAndGetsAHigherToken(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	first := acquire(t, newClient(t, s), "orders:2", Options{Lease: 10 * time.Second})
	type result struct {
		lock *Lock
		err  error
		at   time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := newClient(t, s).Acquire(context.Background(), "orders:2",
			Options{Lease: 10 * time.Second, Wait: 20 * time.Second})
		got <- result{l, err, time.Now()}
	}()
	for i := 0; ; i++ {
		if n, _ := redis.Int64(status(t, admin, "orders:2")["waiters"], nil); n == 1 {
			break
		}
		if i == 200 {
			t.Fatal("the second client never queued (FLOCK.STATUS waiters 1)")
		}
		time.Sleep(25 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-got:
		t.Fatalf("the second acquire returned while the lock was held: %+v", r)
	default:
	}
	released := time.Now()
	if _, err := first.Release(); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting client was not served after the release")
	}
	if r.err != nil || r.lock == nil {
		t.Fatalf("waiting acquire: %v, %v", r.lock, r.err)
	}
	if r.lock.Token <= first.Token {
		t.Fatalf("second token %d not above the first %d", r.lock.Token, first.Token)
	}
	t.Logf("tokens %d then %d; the waiter got it %v after the release", first.Token,
		r.lock.Token, r.at.Sub(released))
	r.lock.Release()
}

func TestCancellingTheContextTakesAWaitingAcquireOutOfTheQueue(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	holder := acquire(t, newClient(t, s), "orders:10", Options{Lease: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		lock *Lock
		err  error
	}
	got := make(chan result, 1)
	go func() {
		l, err := newClient(t, s).Acquire(ctx, "orders:10", Options{Wait: 20 * time.Second})
		got <- result{l, err}
	}()
	waiters := func() int64 {
		n, _ := redis.Int64(status(t, admin, "orders:10")["waiters"], nil)
		return n
	}
	for i := 0; waiters() != 1; i++ {
		if i == 200 {
			t.Fatal("the acquire never queued")
		}
		time.Sleep(25 * time.Millisecond)
	}
	cancel()
	select {
	case r := <-got:
		if r.lock != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled acquire: %v, %v; want nil, context.Canceled", r.lock, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled acquire did not return")
	}
	for i := 0; waiters() != 0; i++ {
		if i == 200 {
			t.Fatal("the cancelled acquire is still queued")
		}
		time.Sleep(25 * time.Millisecond)
	}
	if free, err := holder.Release(); err != nil || !free {
		t.Fatalf("Release: %v, %v", free, err)
	}
	if ttl, _ := redis.Int64(admin.Do("FLOCK.TTL", "orders:10")); ttl != -2 {
		t.Fatalf("the lock went to the cancelled acquire: FLOCK.TTL %d", ttl)
	}
}

func TestARenewalKeepsA1sLeaseAliveFor5s(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	events := redis.PubSubConn{Conn: s.conn(t)}
	if err := events.Subscribe("__flock__:orders:3"); err != nil {
		t.Fatal(err)
	}
	events.Receive() // the confirmation
	var renewals int
	var mu sync.Mutex
	go func() {
		for {
			switch v := events.Receive().(type) {
			case redis.Message:
				if strings.HasPrefix(string(v.Data), "renewed ") {
					mu.Lock()
					renewals++
					mu.Unlock()
				}
			case error:
				return
			}
		}
	}()
	lock := acquire(t, newClient(t, s), "orders:3", Options{Lease: time.Second})
	select {
	case <-lock.Lost():
		t.Fatalf("lost within 5 s: %v", lock.Err())
	case <-time.After(5 * time.Second):
	}
	if err := lock.Err(); err != nil {
		t.Fatalf("Err() after 5 s: %v", err)
	}
	st := status(t, admin, "orders:3")
	if tok, _ := redis.Int64(st["token"], nil); tok != lock.Token {
		t.Fatalf("after 5 s FLOCK.STATUS says token %v, ours is %d", st["token"], lock.Token)
	}
	if stored, err := lock.FenceSet("res:3", "still ours"); err != nil || !stored {
		t.Fatalf("FenceSet after 5 s: %v, %v", stored, err)
	}
	mu.Lock()
	n := renewals
	mu.Unlock()
	// At a third of the lease: about 15 in 5 s; a noisy machine may delay a few.
	if n < 8 {
		t.Fatalf("%d renewals seen in 5 s, want about 15", n)
	}
	t.Logf("%d renewals in 5 s of a 1 s lease", n)
	lock.Release()
}

// forceRelease subscribes to the lock's channel, force-releases it from another connection,
// and returns when the test's own subscriber saw the event.
func forceRelease(t *testing.T, s *server, name string) time.Time {
	t.Helper()
	events := redis.PubSubConn{Conn: s.conn(t)}
	if err := events.Subscribe("__flock__:" + name); err != nil {
		t.Fatal(err)
	}
	events.Receive()
	if n, err := redis.Int64(s.conn(t).Do("FLOCK.FORCERELEASE", name)); err != nil || n != 1 {
		t.Fatalf("FLOCK.FORCERELEASE: %v, %v", n, err)
	}
	for i := 0; i < 100; i++ {
		switch v := events.ReceiveWithTimeout(10 * time.Second).(type) {
		case redis.Message:
			if strings.HasPrefix(string(v.Data), "forcereleased ") {
				return time.Now()
			}
		case error:
			t.Fatal(v)
		}
	}
	t.Fatal("no forcereleased event")
	return time.Time{}
}

func TestForceReleaseFiresLostWithin100msOfTheEvent(t *testing.T) {
	s := startFlockd(t)
	lock := acquire(t, newClient(t, s), "orders:4", Options{Lease: 30 * time.Second})
	event := forceRelease(t, s, "orders:4")
	lost := waitLost(t, lock, 5*time.Second)
	// With a 30 s lease neither a renewal (every 10 s) nor the clock (27 s) could tell
	// this soon: only the event can.
	if d := lost.Sub(event); d > 100*time.Millisecond {
		t.Fatalf("Lost fired %v after the event", d)
	} else {
		t.Logf("Lost fired %v after the test's subscriber saw the event", d)
	}
	if r := lostReason(t, lock); r != ForceReleased {
		t.Fatalf("reason %v, want ForceReleased", r)
	}
}

func TestWithoutEventsAForceReleaseIsFoundByTheNextRenewal(t *testing.T) {
	s := startFlockd(t)
	lease := 3 * time.Second
	lock := acquire(t, newClient(t, s), "orders:5", Options{Lease: lease, NoEvents: true})
	event := forceRelease(t, s, "orders:5")
	lost := waitLost(t, lock, 5*time.Second)
	if r := lostReason(t, lock); r != RenewRefused {
		t.Fatalf("reason %v, want RenewRefused", r)
	}
	// Within one renewal interval (a third of the lease), with slack for a busy machine.
	if d := lost.Sub(event); d > lease/3+time.Second {
		t.Fatalf("Lost fired %v after the force-release, more than one renewal interval", d)
	} else {
		t.Logf("without events Lost fired %v after the force-release (interval %v)", d, lease/3)
	}
}

func TestKill9OfTheServerFiresLostBeforeTheLeaseEnds(t *testing.T) {
	s := startFlockd(t)
	lease := 3 * time.Second
	before := time.Now() // the server's lease runs from after this: it ends after before+lease
	lock := acquire(t, newClient(t, s), "orders:6", Options{Lease: lease})
	s.kill()
	lost := waitLost(t, lock, 2*lease)
	if !lost.Before(before.Add(lease)) {
		t.Fatalf("Lost fired %v after the acquire was sent, not before the lease's end", lost.Sub(before))
	}
	if r := lostReason(t, lock); r != LeaseRunningOut {
		t.Fatalf("reason %v, want LeaseRunningOut", r)
	}
	t.Logf("Lost fired %v after the acquire (lease %v): %v", lost.Sub(before), lease, lock.Err())
	if _, err := lock.FenceSet("res:6", "late"); !errors.Is(err, ErrLost) {
		t.Fatalf("FenceSet after the loss: %v, want ErrLost", err)
	}
}

func TestASessionLockIsTiedToItsConnection(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	lock := acquire(t, newClient(t, s), "orders:11", Options{Lease: 3 * time.Second, Session: true})
	holders, err := redis.Values(admin.Do("FLOCK.HOLDERS", "orders:11"))
	if err != nil || len(holders) != 1 {
		t.Fatalf("FLOCK.HOLDERS: %v, %v", holders, err)
	}
	fields, _ := redis.Values(holders[0], nil)
	session := ""
	for i := 0; i+1 < len(fields); i += 2 {
		if k, _ := redis.String(fields[i], nil); k == "session" {
			session = fmt.Sprint(fields[i+1])
		}
	}
	if session != "1" {
		t.Fatalf("FLOCK.HOLDERS says session %q, want 1: %v", session, fields)
	}
	// Its connection is its holding: when it drops, the lock is lost at the next renewal,
	// without trying another connection.
	s.kill()
	waitLost(t, lock, 3*time.Second)
	if r := lostReason(t, lock); r != ConnectionLost {
		t.Fatalf("reason %v, want ConnectionLost", r)
	}
}

func TestKillingTheClusterLeaderDoesNotLoseTheLock(t *testing.T) {
	nodes := startCluster(t)
	old := leader(t, nodes)
	// The leader first, so the lock's connections go to it and must move.
	ordered := []*server{nodes[old], nodes[(old+1)%3], nodes[(old+2)%3]}
	lease := 6 * time.Second
	lock := acquire(t, newClient(t, ordered...), "orders:7", Options{Lease: lease})
	time.Sleep(500 * time.Millisecond)
	ordered[0].kill()
	killed := time.Now()
	select {
	case <-lock.Lost():
		t.Fatalf("lost after the leader's kill: %v", lock.Err())
	case <-time.After(2 * lease):
	}
	newLeader := leader(t, nodes)
	if newLeader == old {
		t.Fatal("the killed node is still the leader")
	}
	admin := nodes[newLeader].conn(t)
	st := status(t, admin, "orders:7")
	if tok, _ := redis.Int64(st["token"], nil); tok != lock.Token {
		t.Fatalf("%v after the kill FLOCK.STATUS says token %v, ours is %d", time.Since(killed), st["token"], lock.Token)
	}
	if stored, err := lock.FenceSet("res:7", "after the failover"); err != nil || !stored {
		t.Fatalf("FenceSet after the failover: %v, %v", stored, err)
	}
	t.Logf("held for %v after the leader (node %d) was killed; node %d leads now", 2*lease, old+1, newLeader+1)
	// The lock's subscription died with the old leader and was made again elsewhere: a
	// force-release is told by the event (a renewal would say RenewRefused).
	event := forceRelease(t, nodes[newLeader], "orders:7")
	lost := waitLost(t, lock, 5*time.Second)
	if r := lostReason(t, lock); r != ForceReleased {
		t.Fatalf("after the failover a force-release gave %v, want ForceReleased (from the event)", r)
	}
	t.Logf("after the failover Lost fired %v after the force-release event", lost.Sub(event))
}

func TestAFencedWriteAfterTheLossSendsNothing(t *testing.T) {
	s := startFlockd(t)
	monitor := s.conn(t)
	if _, err := monitor.Do("MONITOR"); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1000)
	go func() {
		for {
			line, err := redis.String(monitor.Receive())
			if err != nil {
				close(seen)
				return
			}
			seen <- line
		}
	}()
	lock := acquire(t, newClient(t, s), "orders:8", Options{Lease: 30 * time.Second})
	if stored, err := lock.FenceSet("res:8", "before"); err != nil || !stored {
		t.Fatalf("FenceSet while held: %v, %v", stored, err)
	}
	forceRelease(t, s, "orders:8")
	waitLost(t, lock, 5*time.Second)
	if _, err := lock.FenceSet("res:8", "after the loss"); !errors.Is(err, ErrLost) {
		t.Fatalf("FenceSet after the loss: %v, want ErrLost", err)
	}
	// A marker after it: once MONITOR shows the marker, it has shown all that came before.
	s.conn(t).Do("ECHO", "marker-8")
	var fenceSets []string
	for line := range seen {
		if strings.Contains(line, `"FENCE.SET"`) {
			fenceSets = append(fenceSets, line)
		}
		if strings.Contains(line, "marker-8") {
			break
		}
	}
	if len(fenceSets) != 1 || !strings.Contains(fenceSets[0], `"before"`) {
		t.Fatalf("MONITOR saw these FENCE.SETs, want only the one before the loss: %q", fenceSets)
	}
	if v, _ := redis.String(s.conn(t).Do("FENCE.GET", "res:8")); v != "before" {
		t.Fatalf("FENCE.GET res:8 = %q", v)
	}
}

func TestContextIsCancelledOnLoss(t *testing.T) {
	s := startFlockd(t)
	lock := acquire(t, newClient(t, s), "orders:9", Options{Lease: 30 * time.Second})
	ctx := lock.Context()
	stopped := make(chan error, 1)
	go func() { // work under the lock's context: it stops on its own
		select {
		case <-ctx.Done():
			stopped <- ctx.Err()
		case <-time.After(20 * time.Second):
			stopped <- nil
		}
	}()
	time.Sleep(100 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("the context is done while the lock is held: %v", ctx.Err())
	}
	forceRelease(t, s, "orders:9")
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the work ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the work under Context() did not stop")
	}
	if !errors.Is(lock.Err(), ErrLost) {
		t.Fatalf("Err() = %v", lock.Err())
	}
}

// The README shows example/main.go as it is, and it runs against a real server.
func TestTheReadmeExampleRuns(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	source, err := os.ReadFile("example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(source)+"```\n") {
		t.Fatal("README.md does not show example/main.go as it is")
	}
	s := startFlockd(t)
	bin := filepath.Join(t.TempDir(), "example")
	build := exec.Command("go", "build", "-o", bin, "./example")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./example: %v\n%s", err, out)
	}
	run := exec.Command(bin)
	run.Env = append(os.Environ(), "FLOCKD_URL=redis://"+s.addr)
	out, err := run.CombinedOutput()
	t.Logf("the README's example:\n%s", out)
	if err != nil {
		t.Fatalf("example: %v", err)
	}
	for _, want := range []string{"acquired orders:42 with token 1", "stored: true", "released: true"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("no %q in the example's output", want)
		}
	}
	if v, _ := redis.String(s.conn(t).Do("FENCE.GET", "res:orders:42")); v != "written by token 1" {
		t.Fatalf("FENCE.GET res:orders:42 = %q", v)
	}
}

// Issue 35: validity was counted from the blocking acquire's send, so a grant after a wait
// longer than the lease was reported lost at once. Now such a grant is renewed before Acquire
// returns, and counts from that renewal's send.
func TestALockGrantedAfterAWaitLongerThanItsLeaseIsKept(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	holder, err := redis.Int64(admin.Do("FLOCK.ACQUIRE", "waited", 20000))
	if err != nil {
		t.Fatal(err)
	}
	releaser := s.conn(t)
	timer := time.AfterFunc(3*time.Second, func() { releaser.Do("FLOCK.RELEASE", "waited", holder) })
	defer timer.Stop()
	started := time.Now()
	lease := 1500 * time.Millisecond
	lock := acquire(t, newClient(t, s), "waited", Options{Lease: lease, Wait: 6 * time.Second})
	if waited := time.Since(started); waited <= lease {
		t.Fatalf("granted after %v, not after a wait longer than the lease", waited)
	}
	if err := lock.Err(); err != nil {
		t.Fatalf("reported lost at grant: %v", err)
	}
	select {
	case <-lock.Lost():
		t.Fatalf("reported lost: %v", lock.Err())
	case <-time.After(2*lease/3 + 600*time.Millisecond): // two renewal periods and some slack
	}
	if err := lock.Err(); err != nil {
		t.Fatalf("reported lost: %v", err)
	}
	if ttl, _ := redis.Int64(admin.Do("FLOCK.TTL", "waited")); ttl <= 0 {
		t.Fatalf("FLOCK.TTL = %d, want it held", ttl)
	}
	st := status(t, admin, "waited")
	if locked, _ := redis.Int64(st["locked"], nil); locked != 1 {
		t.Fatalf("FLOCK.STATUS locked = %v", st["locked"])
	}
	if token, _ := redis.Int64(st["token"], nil); token != lock.Token {
		t.Fatalf("FLOCK.STATUS token = %v, the lock's %d", st["token"], lock.Token)
	}
	if free, err := lock.Release(); err != nil || !free {
		t.Fatalf("Release() = %v, %v", free, err)
	}
}

// The holding is gone when the renewal after a long wait arrives (here: removed just before
// it is sent, as if the lease ran out between the grant and its reply): not granted, never a
// lock that is lost already.
func TestALateGrantWhoseLeaseRanOutBeforeTheRenewalIsNotGranted(t *testing.T) {
	s := startFlockd(t)
	admin := s.conn(t)
	holder, err := redis.Int64(admin.Do("FLOCK.ACQUIRE", "late", 20000))
	if err != nil {
		t.Fatal(err)
	}
	releaser := s.conn(t)
	timer := time.AfterFunc(time.Second, func() { releaser.Do("FLOCK.RELEASE", "late", holder) })
	defer timer.Stop()
	testHookBeforeRenewAtOnce = func() { admin.Do("FLOCK.FORCERELEASE", "late") }
	defer func() { testHookBeforeRenewAtOnce = nil }()
	lock, err := newClient(t, s).Acquire(context.Background(), "late",
		Options{Lease: 600 * time.Millisecond, Wait: 5 * time.Second})
	if lock != nil || err != nil {
		t.Fatalf("Acquire() = %v, %v; want nil, nil", lock, err)
	}
	if ttl, _ := redis.Int64(admin.Do("FLOCK.TTL", "late")); ttl != -2 {
		t.Fatalf("FLOCK.TTL = %d, want -2", ttl)
	}
}

// Issue 35: the README's "program of your own" did not build offline (it lacked redigo's
// replace), and the example without FLOCKD_URL failed with "dial tcp: missing address". The
// go.mod the README gives builds the example copied into a module of its own, offline, and
// that program, with FLOCKD_URL unset, reaches flockd at its default address.
func TestAProgramOfYourOwnBuildsOfflineAndFindsTheDefaultAddress(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	at := strings.Index(text, "A program of your own")
	if at < 0 {
		t.Fatal("README.md has no \"A program of your own\" section")
	}
	block := text[at:]
	start := strings.Index(block, "```\n")
	end := strings.Index(block[start+4:], "```\n")
	if start < 0 || end < 0 {
		t.Fatal("no go.mod block after \"A program of your own\"")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	gomod := strings.ReplaceAll(block[start+4:start+4+end], "/path/to/clients/go", here)
	mine := t.TempDir()
	source, err := os.ReadFile("example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"go.mod": gomod, "main.go": string(source)} {
		if err := os.WriteFile(filepath.Join(mine, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "mine")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = mine
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's go.mod does not build offline: %v\n%s", err, out)
	}
	// flockd's default address, if nothing else holds it here.
	probe, err := net.Listen("tcp", "127.0.0.1:6390")
	if err != nil {
		t.Skipf("127.0.0.1:6390 is in use, so the default address cannot be checked: %v", err)
	}
	probe.Close()
	startFlockd(t, "--port", "6390")
	run := exec.Command(bin)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOCKD_URL=") {
			env = append(env, kv)
		}
	}
	run.Env = env
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the program without FLOCKD_URL: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "acquired orders:42 with token 1") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
