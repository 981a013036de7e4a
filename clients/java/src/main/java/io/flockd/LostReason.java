package io.flockd;

/**
 * Why a lock can no longer be trusted: the value {@link FlockdFencedLock#lostFuture()} completes
 * with.
 *
 * @param kind what happened
 * @param lockName the lock
 * @param token the token of the holding that was lost
 * @param detail the server's error or the exception, when there is one
 */
public record LostReason(Kind kind, String lockName, long token, String detail) {
    public enum Kind {
        /** flockd published {@code forcereleased <token>} (FLOCK.FORCERELEASE). */
        FORCE_RELEASED,
        /** flockd published {@code expired <token>}: the lease ran out on the server. */
        EXPIRED,
        /** A renewal was refused ({@code -NOTOWNER}, or another error reply): the holding is gone. */
        RENEWAL_REFUSED,
        /**
         * No renewal succeeded for the lease minus the margin, counted from when the last
         * successful request was sent (nodes unreachable, or this process was paused); or, with an
         * explicit lease time, that lease is about to run out.
         */
        LEASE_RUNNING_OUT,
    }

    @Override
    public String toString() {
        String what = switch (kind) {
            case FORCE_RELEASED -> "force-released";
            case EXPIRED -> "the lease expired";
            case RENEWAL_REFUSED -> "renewal refused";
            case LEASE_RUNNING_OUT -> "the lease is about to run out";
        };
        return what + " (" + lockName + ", token " + token + ")" + (detail == null ? "" : ": " + detail);
    }
}
