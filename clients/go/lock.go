package flockd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// maxResubscribes bounds how often a lock re-subscribes after its event connection dropped
// (renewals still tell when it gives up).
const maxResubscribes = 20

// Lock is a granted lock. It renews itself until Release or until it is lost. Its methods are
// safe for concurrent use.
type Lock struct {
	Name string
	// Token is the fencing token of the grant: pass it with every write to what the lock
	// protects, so a store can refuse writes from an older holder.
	Token int64

	client  *Client
	lease   time.Duration
	margin  time.Duration
	session bool

	// connMu serialises the lock's commands (renewals, fenced writes, the release) on its
	// connection; conn is nil after a failure until the next command dials again.
	connMu sync.Mutex
	conn   redis.Conn
	node   int

	mu         sync.Mutex
	validUntil time.Time // from when the last successful request was sent, plus the lease
	err        *LostError
	released   bool
	events     redis.Conn // the subscription, closed on the way out
	failure    error      // the last failed send or dial, for the loss's detail

	lost     chan struct{} // closed when lost (never after a release)
	quit     chan struct{} // closed when lost or released: the background work ends
	quitOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
}

// newLock is a granted lock, not yet renewing (start does that).
func newLock(acquireCtx context.Context, c *Client, name string, token int64, opts Options,
	sent time.Time, conn redis.Conn, node int) *Lock {
	lease := opts.lease()
	l := &Lock{
		Name:       name,
		Token:      token,
		client:     c,
		lease:      lease,
		margin:     safetyMargin(lease),
		session:    opts.Session,
		conn:       conn,
		node:       node,
		validUntil: sent.Add(lease),
		lost:       make(chan struct{}),
		quit:       make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(detached{acquireCtx})
	return l
}

// start subscribes (unless noEvents) and starts renewing, counting from the send of the
// request behind the lock's validity.
func (l *Lock) start(noEvents bool) {
	if !noEvents {
		// Subscribed before Acquire returns, so no event after that is missed.
		if ps, err := l.subscribe(); err == nil {
			go l.listen(ps)
		}
	}
	l.mu.Lock()
	renewedAt := l.validUntil.Add(-l.lease)
	l.mu.Unlock()
	go l.keep(renewedAt)
}

// renewAtOnce is the renewal right after a grant that followed a wait, before the lock is
// handed over: the server may have applied the grant any time before its reply. true when
// renewed (the validity now counts from its send), false on -NOTOWNER (the lease ran out
// before the reply); another failure is returned.
func (l *Lock) renewAtOnce() (bool, error) {
	if testHookBeforeRenewAtOnce != nil {
		testHookBeforeRenewAtOnce()
	}
	// The server's lease, however it started, ends before now plus the lease.
	until := time.Now().Add(l.lease - l.margin)
	reply, sent, err := l.do(nil, until, "FLOCK.RENEW", l.Name, l.Token, l.lease.Milliseconds())
	var refused redis.Error
	if errors.As(err, &refused) && strings.HasPrefix(string(refused), "NOTOWNER") {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if n, _ := redis.Int64(reply, nil); n != 1 {
		return false, fmt.Errorf("FLOCK.RENEW replied %v", reply)
	}
	l.mu.Lock()
	l.validUntil = sent.Add(l.lease)
	l.mu.Unlock()
	return true, nil
}

// discard closes the connection of a lock never handed over.
func (l *Lock) discard() {
	l.connMu.Lock()
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
	l.connMu.Unlock()
	l.cancel()
}

// safetyMargin is how long before the lease's end the lock counts as lost: a tenth of the
// lease, at most 2 s, so a write started just before still lands well inside it.
func safetyMargin(lease time.Duration) time.Duration {
	if m := lease / 10; m < 2*time.Second {
		return m
	}
	return 2 * time.Second
}

// Lost is closed when the lock is lost (Err says why). It is never closed after Release.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Context is cancelled when the lock is lost or released: run the work the lock guards under
// it, and it stops on its own. It carries the values of Acquire's context, not its deadline.
func (l *Lock) Context() context.Context { return l.ctx }

// Err is nil while the lock is held, else a *LostError saying why it was lost. It checks the
// clock too: after this process was paused past the lease it reports the loss before the
// renewing goroutine has run. After Release it is nil.
func (l *Lock) Err() error {
	l.mu.Lock()
	lostErr, released, validUntil := l.err, l.released, l.validUntil
	l.mu.Unlock()
	if lostErr != nil {
		return lostErr
	}
	if released {
		return nil
	}
	if !time.Now().Add(l.margin).Before(validUntil) {
		l.lose(LeaseRunningOut, "by the clock")
		return l.Err()
	}
	return nil
}

// FenceSet sends FENCE.SET key token value LOCK name: true when flockd stored the value,
// false when it refused (a higher token wrote to key, or this holding is no longer live).
// Once the lock is known to be lost it sends nothing and returns the *LostError.
func (l *Lock) FenceSet(key string, value interface{}) (bool, error) {
	if err := l.usable(); err != nil {
		return false, err
	}
	reply, _, err := l.do(l.usable, time.Now().Add(replyTimeout),
		"FENCE.SET", key, l.Token, value, "LOCK", l.Name)
	if err != nil {
		return false, err
	}
	stored, err := redis.Int64(reply, nil)
	if err != nil {
		return false, fmt.Errorf("flockd: FENCE.SET: %w", err)
	}
	return stored == 1, nil
}

func (l *Lock) usable() error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return ErrReleased
	}
	return l.Err()
}

// Release stops the renewals and sends FLOCK.RELEASE: true when the holding is gone now,
// false when a reentrant hold (same Owner) remains. A lock lost already gets flockd's
// -NOTOWNER as the error. The lock's Context is cancelled; Lost is not closed.
func (l *Lock) Release() (bool, error) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return false, ErrReleased
	}
	l.released = true
	wasLost := l.err != nil
	l.mu.Unlock()
	l.stop()
	l.cancel()
	// A lock lost already is most likely gone on the server, or the server is unreachable:
	// one short try, not the full reply timeout.
	until := time.Now().Add(replyTimeout)
	if wasLost {
		until = time.Now().Add(connectTimeout)
	}
	reply, _, err := l.do(nil, until, "FLOCK.RELEASE", l.Name, l.Token)
	l.connMu.Lock()
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
	l.connMu.Unlock()
	if err != nil {
		return false, err
	}
	free, err := redis.Int64(reply, nil)
	return free == 1, err
}

// lose records the first reason the lock is lost; nothing after a release.
func (l *Lock) lose(reason Reason, detail string) {
	l.mu.Lock()
	if l.released || l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = &LostError{Name: l.Name, Token: l.Token, Reason: reason, Detail: detail}
	close(l.lost)
	l.mu.Unlock()
	l.cancel()
	l.stop()
}

// stop ends the background work: the keeper, a renewal in flight, the subscription.
func (l *Lock) stop() {
	l.quitOnce.Do(func() {
		close(l.quit)
		l.mu.Lock()
		if l.events != nil {
			l.events.Close() // unblocks the listener's read
		}
		l.mu.Unlock()
	})
}

func (l *Lock) quitting() bool {
	select {
	case <-l.quit:
		return true
	default:
		return false
	}
}

// errStopped: a command given up because the lock was released or lost meanwhile.
var errStopped = errors.New("flockd: stopped")

// do sends one command on the lock's connection; the reply and when the request was sent.
// A dropped connection or -CLUSTERDOWN sends it again through the next node, until `until`
// (a Session lock's connection is its holding: there it is lost instead). check, if given,
// must pass before each send.
func (l *Lock) do(check func() error, until time.Time, cmd string, args ...interface{}) (interface{}, time.Time, error) {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	var last error
	for attempt := 0; attempt < 1000; attempt++ {
		if check != nil {
			if err := check(); err != nil {
				return nil, time.Time{}, err
			}
		}
		left := time.Until(until)
		if left <= 0 {
			if last == nil {
				last = errors.New("no time left")
			}
			return nil, time.Time{}, fmt.Errorf("flockd: %s: %w", cmd, last)
		}
		if left > replyTimeout {
			left = replyTimeout
		}
		if l.conn == nil {
			if l.session {
				l.lose(ConnectionLost, fmt.Sprint(last))
				return nil, time.Time{}, fmt.Errorf("flockd: %s: the session's connection closed: %w", cmd, last)
			}
			ctx, cancel := context.WithDeadline(context.Background(), until)
			conn, node, err := l.client.dial(ctx)
			cancel()
			if err != nil {
				last = err
				l.noteFailure(err)
				l.pause(until)
				continue
			}
			l.conn, l.node = conn, node
		}
		sent := time.Now()
		reply, err := redis.DoWithTimeout(l.conn, left, cmd, args...)
		if err == nil {
			return reply, sent, nil
		}
		last = err
		var serverErr redis.Error
		if errors.As(err, &serverErr) && !isClusterDown(err) {
			return nil, sent, err // the server's answer: not to be sent again
		}
		// A dropped connection, a timeout, or -CLUSTERDOWN: through the next node.
		l.noteFailure(err)
		l.conn.Close()
		l.conn = nil
		l.client.skip(l.node)
		if isClusterDown(err) {
			l.pause(until)
		}
	}
	return nil, time.Time{}, fmt.Errorf("flockd: %s: %w", cmd, last)
}

// pause waits a little before going round the nodes again (not past until, not after quit
// unless the lock is being released).
func (l *Lock) pause(until time.Time) {
	d := retryPause
	if left := time.Until(until); left < d {
		d = left
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.quit:
		if !l.isReleased() {
			return
		}
		<-t.C
	}
}

func (l *Lock) noteFailure(err error) {
	l.mu.Lock()
	l.failure = err
	l.mu.Unlock()
}

// failureDetail says what failed last, for a LeaseRunningOut loss.
func (l *Lock) failureDetail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure == nil {
		return "no renewal came back in time"
	}
	return "last failure: " + l.failure.Error()
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

func (l *Lock) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil.Add(-l.margin)
}

type renewal struct {
	sent time.Time
	err  error
}

// keep renews at a third of the lease until the lock is released or lost, and loses it when
// the lease counted from the last successful renewal's send is about to run out.
func (l *Lock) keep(renewedAt time.Time) {
	renewTimer := time.NewTimer(time.Until(renewedAt.Add(l.lease / 3)))
	deadlineTimer := time.NewTimer(time.Until(l.deadline()))
	defer renewTimer.Stop()
	defer deadlineTimer.Stop()
	var inFlight chan renewal // nil while no renewal is out
	for {
		select {
		case <-l.quit:
			return
		case <-deadlineTimer.C:
			if left := time.Until(l.deadline()); left > 0 { // renewed meanwhile
				deadlineTimer.Reset(left)
				continue
			}
			l.lose(LeaseRunningOut, l.failureDetail())
			return
		case <-renewTimer.C:
			// After a pause both timers may be due: the clock decides, not the select.
			if !time.Now().Before(l.deadline()) {
				l.lose(LeaseRunningOut, l.failureDetail())
				return
			}
			inFlight = make(chan renewal, 1)
			go l.renew(inFlight)
		case r := <-inFlight:
			inFlight = nil
			var refused redis.Error
			switch {
			case r.err == nil:
				l.mu.Lock()
				l.validUntil = r.sent.Add(l.lease)
				l.mu.Unlock()
				l.noteFailure(nil)
				resetTimer(deadlineTimer, time.Until(l.deadline()))
				renewTimer.Reset(time.Until(r.sent.Add(l.lease / 3)))
			case errors.As(r.err, &refused) && !isClusterDown(r.err):
				l.lose(RenewRefused, string(refused))
				return
			case errors.Is(r.err, errStopped), errors.Is(r.err, ErrLost):
				return
			default:
				// Every node failed until the deadline: the deadline timer says it.
				l.noteFailure(r.err)
			}
		}
	}
}

// resetTimer moves a timer that may have fired, without leaving a stale tick in its channel.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

func (l *Lock) renew(result chan<- renewal) {
	check := func() error {
		if l.quitting() {
			return errStopped
		}
		return nil
	}
	reply, sent, err := l.do(check, l.deadline(), "FLOCK.RENEW", l.Name, l.Token, l.lease.Milliseconds())
	if err == nil {
		if n, _ := redis.Int64(reply, nil); n != 1 {
			err = redis.Error(fmt.Sprintf("FLOCK.RENEW replied %v", reply))
		}
	}
	result <- renewal{sent: sent, err: err}
}

// subscribe opens the lock's event subscription on some node and waits for its confirmation.
func (l *Lock) subscribe() (redis.PubSubConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
	defer cancel()
	conn, _, err := l.client.dial(ctx)
	if err != nil {
		return redis.PubSubConn{}, err
	}
	ps := redis.PubSubConn{Conn: conn}
	if err := ps.Subscribe("__flock__:" + l.Name); err != nil {
		conn.Close()
		return ps, err
	}
	switch v := ps.ReceiveWithTimeout(replyTimeout).(type) {
	case redis.Subscription:
	case error:
		conn.Close()
		return ps, v
	default:
		conn.Close()
		return ps, fmt.Errorf("flockd: SUBSCRIBE replied %v", v)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.quitting() {
		conn.Close()
		return ps, errStopped
	}
	l.events = conn
	return ps, nil
}

// listen reads the lock's channel until the lock is released or lost: `expired <token>` or
// `forcereleased <token>` of this holding loses it. A dropped subscription is made again on
// another node (events published meanwhile are missed; the next renewal tells).
func (l *Lock) listen(ps redis.PubSubConn) {
	for failures := 0; failures <= maxResubscribes; {
		switch v := ps.ReceiveWithTimeout(0).(type) {
		case redis.Message:
			if reason, ok := endsHolding(v.Data, l.Token); ok {
				l.lose(reason, "")
				return
			}
		case error:
			ps.Close()
			for failures++; failures <= maxResubscribes; failures++ {
				if l.quitting() || !l.sleep(time.Duration(failures)*retryPause) {
					return
				}
				var err error
				if ps, err = l.subscribe(); err == nil {
					break
				}
				if errors.Is(err, errStopped) {
					return
				}
			}
		}
	}
}

// sleep waits d; false when the lock was released or lost meanwhile.
func (l *Lock) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.quit:
		return false
	}
}

// endsHolding: the reason an `__flock__:<name>` message ends the holding of token, if it does.
func endsHolding(data []byte, token int64) (Reason, bool) {
	event, raw, ok := strings.Cut(string(data), " ")
	if !ok {
		return 0, false
	}
	if t, err := strconv.ParseInt(raw, 10, 64); err != nil || t != token {
		return 0, false
	}
	switch event {
	case "expired":
		return Expired, true
	case "forcereleased":
		return ForceReleased, true
	}
	return 0, false
}

// testHookBeforeRenewAtOnce, when set (by tests only), runs just before the renewal that
// follows a grant after a wait.
var testHookBeforeRenewAtOnce func()
