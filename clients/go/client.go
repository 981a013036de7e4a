// Package flockd takes fenced locks from flockd (a lock server that speaks the Redis
// protocol) on redigo: a fencing token per grant, renewals at a third of the lease, and a
// signal the moment the lock can no longer be trusted.
//
// Client.Acquire returns a *Lock with its Token, or nil when the lock was not granted. While it
// is held the lock renews itself; Lost() is closed, Err() says why, and Context() is cancelled
// when it is lost: flockd published that the holding expired or was force-released, a
// renewal was refused, or no renewal succeeded for the lease minus a margin (counted from when
// each request was sent, so a slow network or a paused process counts against it). FenceSet
// writes to a flockd fence register with the token and sends nothing once the lock is lost.
//
// A Client may name several nodes of a flockd cluster: a connection goes to the first that
// accepts it, a renewal, release or fenced write that meets a dropped connection or
// -CLUSTERDOWN is sent again through the next node, so renewals go on across a leader change.
// An acquire is never sent twice (a resent acquire can leave a lock held under a token nobody
// saw).
package flockd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

const (
	// connectTimeout bounds the dial of one node, so a dead node costs the next one little.
	connectTimeout = 2 * time.Second
	// replyTimeout bounds a command that does not block (under appendfsync always on a slow
	// disk a write can take a while and still be in time).
	replyTimeout = 10 * time.Second
	// replySlack is what a blocking acquire is given beyond its WAIT, so the client never
	// gives up before the server's null reply.
	replySlack = 5 * time.Second
	// retryPause is the pause before going round the nodes again after all failed.
	retryPause = 100 * time.Millisecond
)

// Client holds the nodes of one flockd (or one flockd cluster) and how to dial them. It is
// safe for concurrent use; each lock keeps connections of its own.
type Client struct {
	nodes   []string
	options []redis.DialOption

	mu    sync.Mutex
	first int // the node tried first: the last one that answered
}

// NewClient returns a client for the given nodes, each "host:port" or a URL
// ("redis://[user:password@]host:port", "rediss://" for TLS). options are redigo's
// (redis.DialPassword, redis.DialTLSConfig, ...). The package sets the timeouts: a dial
// timeout per node, and per command a read timeout longer than what the command may block.
func NewClient(nodes []string, options ...redis.DialOption) (*Client, error) {
	if len(nodes) == 0 {
		return nil, errors.New("flockd: no node given")
	}
	return &Client{nodes: append([]string(nil), nodes...), options: options}, nil
}

// Options of an acquire. The zero value is an exclusive lock with a 30 s lease, no wait.
type Options struct {
	// Lease: how long the server keeps the lock without a renewal (at least 1 ms; 0 means
	// 30 s). The lock renews itself at a third of it.
	Lease time.Duration
	// Wait: how long to wait in the lock's FIFO queue (WAIT ms) when it is held; 0 gives up
	// at once. A deadline on Acquire's context shortens it.
	Wait time.Duration
	// Owner makes acquires with the same owner reentrant (holds of one holding).
	Owner string
	// Shared takes a read lock; Limit n (1..65535) one of n permits. At most one of them.
	Shared bool
	Limit  int
	// Session: the holding also ends when the lock's connection closes (the lock then keeps
	// that connection and does not move to another node).
	Session bool
	// NoEvents: do not subscribe to the lock's channel. A force-release or expiry is then
	// noticed by the next renewal (within a third of the lease) instead of at once.
	NoEvents bool
}

func (o Options) lease() time.Duration {
	if o.Lease == 0 {
		return 30 * time.Second
	}
	return o.Lease
}

func acquireArgs(name string, o Options, wait time.Duration) ([]interface{}, error) {
	if name == "" {
		return nil, errors.New("flockd: a lock name must not be empty")
	}
	lease := o.lease()
	if lease < time.Millisecond {
		return nil, errors.New("flockd: the lease must be at least 1 ms")
	}
	if o.Shared && o.Limit != 0 {
		return nil, errors.New("flockd: Shared and Limit cannot be combined")
	}
	args := []interface{}{name, lease.Milliseconds()}
	if o.Shared {
		args = append(args, "SHARED")
	}
	if o.Limit != 0 {
		if o.Limit < 1 || o.Limit > 65535 {
			return nil, errors.New("flockd: a limit is 1 to 65535")
		}
		args = append(args, "LIMIT", o.Limit)
	}
	if wait > 0 {
		ms := wait.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		args = append(args, "WAIT", ms)
	}
	if o.Owner != "" {
		args = append(args, "OWNER", o.Owner)
	}
	if o.Session {
		args = append(args, "SESSION")
	}
	return args, nil
}

// Acquire sends FLOCK.ACQUIRE once: a *Lock with its token, or nil and a nil error when the
// lock was not granted (held, and not freed within opts.Wait). Cancelling ctx while the acquire
// waits closes its connection, which removes it from the queue.
//
// An error after the request was sent (a dropped connection, -CLUSTERDOWN) leaves its outcome
// unknown: with an Owner, FLOCK.STATUS tells whether you hold it; otherwise its lease ends it.
//
// A grant that followed a wait and came back later than a third of the lease after the acquire
// was sent is renewed at once, before Acquire returns (the server may have applied it any time
// before its reply), and counts from that renewal's send; refused (-NOTOWNER), the lease ran
// out before the reply and Acquire returns nil, nil.
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (*Lock, error) {
	wait := opts.Wait
	if deadline, ok := ctx.Deadline(); ok && wait > 0 {
		if left := time.Until(deadline); left < wait {
			wait = left
		}
	}
	args, err := acquireArgs(name, opts, wait)
	if err != nil {
		return nil, err
	}
	conn, node, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	// Cancelling ctx closes the connection, which takes the request out of the queue. Exactly
	// one of the watcher and the reply wins `settled`.
	var settled int32
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			if atomic.CompareAndSwapInt32(&settled, 0, 1) {
				conn.Close()
			}
		case <-finished:
		}
	}()
	sent := time.Now() // validity counts from here, not from the reply
	reply, err := redis.DoWithTimeout(conn, wait+replySlack, "FLOCK.ACQUIRE", args...)
	close(finished)
	if !atomic.CompareAndSwapInt32(&settled, 0, 2) {
		// Closed by the cancellation. A grant that came back anyway is given back (a SESSION
		// holding ended with the connection already).
		conn.Close()
		if token, ok := reply.(int64); ok && err == nil && !opts.Session {
			c.releaseAbandoned(name, token)
		}
		return nil, ctx.Err()
	}
	if err != nil {
		if isClusterDown(err) {
			c.skip(node)
		}
		conn.Close()
		return nil, fmt.Errorf("flockd: FLOCK.ACQUIRE %q: %w", name, err)
	}
	if reply == nil {
		conn.Close()
		return nil, nil
	}
	token, ok := reply.(int64)
	if !ok || token <= 0 {
		conn.Close()
		return nil, fmt.Errorf("flockd: FLOCK.ACQUIRE %q replied %v", name, reply)
	}
	l := newLock(ctx, c, name, token, opts, sent, conn, node)
	if wait > 0 && time.Since(sent) > l.lease/3 {
		// Granted after a wait: the server may have applied the grant any time before its
		// reply, so the lease may be shorter than counted from the send. Renew now, on the
		// lock's connection, and count from this renewal's send; refused, the lease ran out
		// before the reply, and the lock was not granted.
		renewed, err := l.renewAtOnce()
		if err != nil || !renewed {
			l.discard()
		}
		if err != nil {
			return nil, fmt.Errorf("flockd: FLOCK.ACQUIRE %q: the renewal after the wait: %w", name, err)
		}
		if !renewed {
			return nil, nil
		}
	}
	l.start(opts.NoEvents)
	return l, nil
}

// releaseAbandoned gives back a grant nobody will use, on a connection of its own (one try: if
// it fails, the lease ends it).
func (c *Client) releaseAbandoned(name string, token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, _, err := c.dial(ctx)
	if err != nil {
		return
	}
	redis.DoWithTimeout(conn, replyTimeout, "FLOCK.RELEASE", name, token)
	conn.Close()
}

// dial connects to the first node that accepts, starting at the one that answered last.
func (c *Client) dial(ctx context.Context) (redis.Conn, int, error) {
	c.mu.Lock()
	first := c.first
	c.mu.Unlock()
	var errs []string
	for i := 0; i < len(c.nodes); i++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		node := (first + i) % len(c.nodes)
		conn, err := c.dialNode(ctx, c.nodes[node])
		if err == nil {
			c.mu.Lock()
			c.first = node
			c.mu.Unlock()
			return conn, node, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", c.nodes[node], err))
	}
	return nil, 0, fmt.Errorf("flockd: no node accepted a connection (%s)", strings.Join(errs, "; "))
}

func (c *Client) dialNode(ctx context.Context, node string) (redis.Conn, error) {
	// Ours first, so the caller's options win; read timeouts are set per command anyway.
	options := append([]redis.DialOption{
		redis.DialConnectTimeout(connectTimeout),
		redis.DialReadTimeout(replyTimeout),
		redis.DialWriteTimeout(replyTimeout),
	}, c.options...)
	if strings.Contains(node, "://") {
		return redis.DialURL(node, options...)
	}
	return redis.DialContext(ctx, "tcp", node, options...)
}

// skip makes the node after `node` the first to try (it answered -CLUSTERDOWN or dropped).
func (c *Client) skip(node int) {
	c.mu.Lock()
	if c.first == node {
		c.first = (node + 1) % len(c.nodes)
	}
	c.mu.Unlock()
}

func isClusterDown(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(string(reply), "CLUSTERDOWN")
}

// detached carries a context's values but not its cancellation: a lock outlives the context of
// the call that acquired it.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detached) Done() <-chan struct{}               { return nil }
func (detached) Err() error                          { return nil }
func (d detached) Value(key interface{}) interface{} { return d.parent.Value(key) }
