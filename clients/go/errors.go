package flockd

import (
	"errors"
	"fmt"
)

// ErrLost matches (with errors.Is) every error that says the lock is lost: Lock.Err, and
// FenceSet's refusal to send.
var ErrLost = errors.New("flockd: the lock is lost")

// ErrReleased is what FenceSet and Release return on a lock that was released already.
var ErrReleased = errors.New("flockd: the lock was released")

// Reason says why a lock was lost.
type Reason int

const (
	// Expired: flockd published that the holding's lease expired.
	Expired Reason = iota + 1
	// ForceReleased: flockd published that the holding was force-released.
	ForceReleased
	// RenewRefused: flockd refused a renewal (-NOTOWNER, or another error reply).
	RenewRefused
	// LeaseRunningOut: no renewal succeeded for the lease minus the margin, counted from when
	// the last successful request was sent (the servers were unreachable, or this process
	// was paused).
	LeaseRunningOut
	// ConnectionLost: the connection of a Session lock closed, which ends its holding.
	ConnectionLost
)

func (r Reason) String() string {
	switch r {
	case Expired:
		return "the lease expired"
	case ForceReleased:
		return "force-released"
	case RenewRefused:
		return "renewal refused"
	case LeaseRunningOut:
		return "the lease is about to run out"
	case ConnectionLost:
		return "the session's connection closed"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// LostError is why a lock was lost: Lock.Err returns one, and FenceSet once the lock is lost.
type LostError struct {
	Name   string
	Token  int64
	Reason Reason
	// Detail: the server's error or the last failure, when there is one.
	Detail string
}

func (e *LostError) Error() string {
	msg := fmt.Sprintf("flockd: lock %q (token %d) lost: %s", e.Name, e.Token, e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }
