package io.flockd;

/**
 * A request to flockd failed: no node could be reached, the connection broke, or (as
 * {@link Reply}) the server answered with an error.
 */
public class FlockdException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public FlockdException(String message) {
        super(message);
    }

    public FlockdException(String message, Throwable cause) {
        super(message, cause);
    }

    /** The server answered with an error reply ({@code -NOTOWNER ...}, {@code -CLUSTERDOWN ...}). */
    public static class Reply extends FlockdException {
        private static final long serialVersionUID = 1L;
        private final String code;

        public Reply(Resp.Error error) {
            super(error.line());
            this.code = error.code();
        }

        /** The error's first word: {@code NOTOWNER}, {@code CLUSTERDOWN}, {@code WRONGPASS}... */
        public String code() {
            return code;
        }
    }

    /** A fenced write was not sent: the lock is lost (or about to be). */
    public static class LockLost extends FlockdException {
        private static final long serialVersionUID = 1L;
        private final LostReason reason;

        public LockLost(LostReason reason) {
            super("the lock is lost: " + reason);
            this.reason = reason;
        }

        public LostReason reason() {
            return reason;
        }
    }
}
