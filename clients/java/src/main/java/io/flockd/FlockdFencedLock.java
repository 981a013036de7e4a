package io.flockd;

import java.io.IOException;
import java.nio.channels.ClosedByInterruptException;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A fenced lock on one flockd lock name, with Redisson's {@code RFencedLock} names and meanings,
 * and a signal when the lock is lost.
 *
 * <p><b>Tokens.</b> Each grant carries a fencing token, strictly increasing per name. Pass it
 * with every write to the guarded resource ({@link #fenceSet}, or a SQL
 * {@code UPDATE ... WHERE fence_token <= ?}) so that a holder that lost the lock without knowing
 * it is refused.
 *
 * <p><b>Reentrancy</b> is Redisson's: per thread. A thread that holds the lock and takes it again
 * only counts one more hold here; nothing is sent, and the token stays the one read at the
 * outermost acquisition (so every write of that thread carries one token). The lock is released
 * on the server when the hold count returns to zero. Another thread of the same JVM waits like
 * any other client.
 *
 * <p><b>Lease.</b> Without a lease time the lease is the client's
 * {@link FlockdClient.Builder#lockWatchdogTimeout lockWatchdogTimeout} (30 s) and a watchdog
 * renews it at a third of it while the lock is held. With a lease time there is no watchdog: the
 * lock ends when that lease does (as in Redisson).
 *
 * <p><b>Loss.</b> {@link #lostFuture()} completes, once, when the holding can no longer be
 * trusted: flockd published {@code forcereleased} or {@code expired} for its token, a renewal
 * was refused, or no renewal succeeded for the lease minus a margin (a tenth of the lease, at
 * most 2 s). Validity is counted from when each request was <em>sent</em>, so a slow network or a
 * paused process counts against it. A renewal that fails for the network is tried again, on the
 * next node of a cluster, until that deadline: a leader change does not lose the lock. A grant
 * that followed a {@code WAIT} may have been applied any time before its reply: when the reply
 * came later than a third of the lease after the acquire was sent, the lock is renewed at once,
 * before the acquire returns, and counts from that renewal's send ({@code -NOTOWNER} there: not
 * granted, as when the wait runs out; {@code lock()} waits on).
 *
 * <p><b>Blocking acquires</b> ({@code WAIT}) use a connection of their own, with a read timeout
 * longer than the wait, and are never sent twice. If one fails after it was sent (connection
 * broken, {@code -CLUSTERDOWN}), its connection is closed (flockd drops the waiter) and
 * {@code FLOCK.STATUS} tells whether it was granted to this thread's OWNER id; only then is a
 * new acquire sent for the time left. Interrupting a thread blocked in
 * {@link #lockInterruptibly()} or {@code tryLock(time, unit)} closes that connection.
 */
public final class FlockdFencedLock implements Lock {
    /** A blocking acquire without a limit waits in rounds of this much, so it never meets max-wait-ms. */
    private static final long WAIT_ROUND_MS = 60_000;
    /** What a blocking acquire's read timeout adds to its wait: the network and the server's fsync. */
    private static final int WAIT_READ_MARGIN_MS = 5_000;

    private final FlockdClient client;
    private final String name;
    /** The holding taken through this object, by whichever thread; null when none. */
    private volatile Holding holding;

    FlockdFencedLock(FlockdClient client, String name) {
        this.client = client;
        this.name = name;
    }

    public String getName() {
        return name;
    }

    // ---- Redisson's RFencedLock

    /** Takes the lock (waiting as long as it takes), renewed by the watchdog; returns its token. */
    public Long lockAndGetToken() {
        return lockUninterruptibly(-1);
    }

    /** Takes the lock with this lease and no watchdog; returns its token. */
    public Long lockAndGetToken(long leaseTime, TimeUnit unit) {
        return lockUninterruptibly(unit.toMillis(leaseTime));
    }

    /** Takes the lock if it is free now; its token, or null. */
    public Long tryLockAndGetToken() {
        try {
            return acquire(0, -1, false);
        } catch (InterruptedException e) {
            throw new AssertionError("a non-blocking acquire is not interrupted", e);
        }
    }

    /** Waits up to {@code waitTime} for the lock (renewed by the watchdog); its token, or null. */
    public Long tryLockAndGetToken(long waitTime, TimeUnit unit) throws InterruptedException {
        return acquire(unit.toMillis(waitTime), -1, true);
    }

    /**
     * Waits up to {@code waitTime} for the lock, with a lease of {@code leaseTime} ({@code -1}: the
     * watchdog's lease, renewed); its token, or null when it was not granted in time.
     */
    public Long tryLockAndGetToken(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return acquire(unit.toMillis(waitTime), leaseTime < 0 ? -1 : unit.toMillis(leaseTime), true);
    }

    /**
     * The token of the holding the current thread holds; when it holds none, the name's latest
     * token on the server ({@code FLOCK.TOKEN}, 0 if none was ever issued), as Redisson's
     * {@code getToken()} reads its counter.
     */
    public Long getToken() {
        Holding h = holding;
        if (h != null && h.owner == Thread.currentThread()) {
            return h.token;
        }
        return (Long) client.execute("FLOCK.TOKEN", name);
    }

    // ---- java.util.concurrent.locks.Lock and Redisson's RLock

    @Override
    public void lock() {
        lockUninterruptibly(-1);
    }

    public void lock(long leaseTime, TimeUnit unit) {
        lockUninterruptibly(unit.toMillis(leaseTime));
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        acquire(-1, -1, true);
    }

    @Override
    public boolean tryLock() {
        return tryLockAndGetToken() != null;
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return acquire(unit.toMillis(time), -1, true) != null;
    }

    public boolean tryLock(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return tryLockAndGetToken(waitTime, leaseTime, unit) != null;
    }

    /**
     * Gives back one hold of the current thread; the last one releases the lock on the server.
     *
     * @throws IllegalMonitorStateException when the current thread does not hold the lock, or
     *     when the server says the holding was already gone (expired or force-released), as
     *     Redisson does
     */
    @Override
    public void unlock() {
        Holding h = holding;
        if (h == null || h.owner != Thread.currentThread()) {
            throw new IllegalMonitorStateException(
                    "attempt to unlock lock " + name + ", not locked by current thread " + Thread.currentThread().getName());
        }
        if (--h.holds > 0) {
            return;
        }
        h.stop();
        synchronized (this) {
            if (holding == h) {
                holding = null;
            }
        }
        LostReason wasLost = h.lostReason;
        try {
            releaseOnServer(h.token);
        } catch (FlockdException.Reply e) {
            if ("NOTOWNER".equals(e.code())) {
                throw new IllegalMonitorStateException("lock " + name + " (token " + h.token + ") was no longer held: "
                        + (wasLost != null ? wasLost + "; " : "") + e.getMessage());
            }
            throw e;
        }
    }

    /**
     * FLOCK.RELEASE until the holding is gone: more than one hold exists on the server only when
     * an acquire whose outcome was unknown was granted after all (same OWNER, so reentrant).
     */
    private void releaseOnServer(long token) {
        for (int i = 0; i < 16; i++) {
            Object free;
            try {
                free = client.execute("FLOCK.RELEASE", name, token);
            } catch (FlockdException.Reply e) {
                if (i > 0 && "NOTOWNER".equals(e.code())) {
                    return; // a retried release whose first attempt did it
                }
                throw e;
            }
            if (Long.valueOf(1).equals(free)) {
                return;
            }
        }
    }

    /** Not supported (as in Redisson's fenced lock). */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("a fenced lock has no conditions");
    }

    /** Whether the current thread holds the lock and it is not lost (checked against the clock too). */
    public boolean isHeldByCurrentThread() {
        Holding h = holding;
        return h != null && h.owner == Thread.currentThread() && !h.isLost();
    }

    /** The current thread's hold count (0 when it does not hold the lock). */
    public int getHoldCount() {
        Holding h = holding;
        return h != null && h.owner == Thread.currentThread() ? h.holds : 0;
    }

    /** Whether anyone holds the lock (asks the server). */
    public boolean isLocked() {
        return remainTimeToLive() >= 0;
    }

    /** The ms left on the lock's lease on the server ({@code FLOCK.TTL}), -2 when nobody holds it. */
    public long remainTimeToLive() {
        return (Long) client.execute("FLOCK.TTL", name);
    }

    /**
     * Removes whoever holds the lock ({@code FLOCK.FORCERELEASE}, an admin command); true when a
     * holding was removed. A holder learns of it through its {@link #lostFuture()}.
     */
    public boolean forceUnlock() {
        Holding h = holding;
        long removed = (Long) client.execute("FLOCK.FORCERELEASE", name);
        if (h != null && removed > 0) {
            h.lose(LostReason.Kind.FORCE_RELEASED, "forceUnlock() through this object");
        }
        return removed > 0;
    }

    // ---- what Redisson lacks

    /**
     * Completes with the reason when the current thread's holding is lost; never completes once
     * it was unlocked.
     *
     * @throws IllegalMonitorStateException when the current thread does not hold the lock
     */
    public CompletableFuture<LostReason> lostFuture() {
        return ownHolding().lost;
    }

    /**
     * {@code FENCE.SET key token value LOCK name} with the current thread's token: true when
     * stored, false when flockd refused it (a higher token wrote, or the holding is gone).
     *
     * @throws FlockdException.LockLost without sending anything, when the lock is known to be lost
     *     (also by the clock)
     * @throws IllegalMonitorStateException when the current thread does not hold the lock
     */
    public boolean fenceSet(String key, String value) {
        return fenceSet(key, value.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }

    public boolean fenceSet(String key, byte[] value) {
        Holding h = ownHolding();
        if (h.isLost()) {
            throw new FlockdException.LockLost(h.lostReason);
        }
        return Long.valueOf(1).equals(client.executeUntil(h.deadline(), "FENCE.SET", key, h.token, value, "LOCK", name));
    }

    private Holding ownHolding() {
        Holding h = holding;
        if (h == null || h.owner != Thread.currentThread()) {
            throw new IllegalMonitorStateException("lock " + name + " is not held by the current thread");
        }
        return h;
    }

    // ---- taking it

    private Long lockUninterruptibly(long leaseMs) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return acquire(-1, leaseMs, true);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * @param waitMs 0: answer at once; -1: wait as long as it takes
     * @param leaseMs -1: the watchdog's lease, renewed
     */
    private Long acquire(long waitMs, long leaseMs, boolean interruptible) throws InterruptedException {
        Thread me = Thread.currentThread();
        Holding mine = holding;
        if (mine != null && mine.owner == me) {
            mine.holds++;
            return mine.token;
        }
        if (interruptible && Thread.interrupted()) {
            throw new InterruptedException();
        }
        boolean watchdog = leaseMs < 0;
        long lease = watchdog ? client.settings.watchdogTimeoutMs : Math.max(1, leaseMs);
        String owner = client.clientId + ":" + me.getId();
        // Listen before asking, so no event after the grant is missed.
        if (client.events != null) {
            client.events.listen(this);
        }
        boolean granted = false;
        try {
            long start = System.nanoTime();
            Grant grant = null;
            for (int attempt = 0; attempt < 100_000 && grant == null; attempt++) {
                grant = waitMs == 0 ? acquireNow(lease, owner) : acquireWaiting(waitMs, start, lease, owner);
                if (grant == null) {
                    return null;
                }
                if (grant.waited && System.nanoTime() - grant.sentNanos > TimeUnit.MILLISECONDS.toNanos(lease) / 3) {
                    // Granted after a wait: the server may have applied the grant any time before
                    // its reply, so the lease may be shorter than counted from the send. Renew now
                    // and count from this renewal's send. Refused, the lease ran out before the
                    // reply: not granted, as when the wait runs out (lock() waits on).
                    Long renewedAt = renewAtOnce(grant.token, lease);
                    if (renewedAt != null) {
                        grant = new Grant(grant.token, renewedAt, true);
                    } else if (waitMs >= 0) {
                        return null;
                    } else {
                        grant = null;
                    }
                }
            }
            if (grant == null) {
                return null;
            }
            Holding h = new Holding(me, grant.token, lease, grant.sentNanos, watchdog);
            synchronized (this) {
                Holding old = holding;
                if (old != null) {
                    old.stop(); // another thread's holding, lost: it was replaced on the server
                }
                holding = h;
            }
            h.start();
            granted = true;
            return grant.token;
        } finally {
            if (!granted && client.events != null) {
                client.events.unlisten(this);
            }
        }
    }

    /**
     * A grant: its token, when the request behind its validity was sent, and whether that was an
     * acquire with {@code WAIT} (whose grant may have been applied any time before its reply).
     */
    private record Grant(long token, long sentNanos, boolean waited) {}

    /** Run just before the renewal that follows a grant after a wait (set by tests only). */
    static volatile Runnable testHookBeforeRenewAtOnce;

    /**
     * The renewal right after a grant that followed a wait, on the watchdog's route, before the
     * lock is handed over: when it was sent, or null on {@code -NOTOWNER} (the lease ran out
     * before the reply). Other failures are thrown, as an acquire's are.
     */
    private Long renewAtOnce(long token, long leaseMs) {
        Runnable hook = testHookBeforeRenewAtOnce;
        if (hook != null) {
            hook.run();
        }
        long leaseNanos = TimeUnit.MILLISECONDS.toNanos(leaseMs);
        long marginNanos = Math.min(leaseNanos / 10, TimeUnit.SECONDS.toNanos(2));
        long sent = System.nanoTime();
        Object reply;
        try {
            // The server's lease, however it started, ends before now plus the lease.
            reply = client.executeUntil(sent + leaseNanos - marginNanos, "FLOCK.RENEW", name, token, leaseMs);
        } catch (FlockdException.Reply e) {
            if ("NOTOWNER".equals(e.code())) {
                return null;
            }
            throw e;
        }
        if (!Long.valueOf(1).equals(reply)) {
            throw new FlockdException("FLOCK.RENEW of lock " + name + " after its grant replied " + reply);
        }
        return sent;
    }

    /** FLOCK.ACQUIRE without WAIT: sent again after a failure, since the OWNER makes a repeat harmless. */
    private Grant acquireNow(long lease, String owner) {
        long sent = System.nanoTime();
        Object token = client.execute("FLOCK.ACQUIRE", name, lease, "OWNER", owner);
        return token == null ? null : new Grant((Long) token, sent, false);
    }

    private Grant acquireWaiting(long waitMs, long start, long lease, String owner) throws InterruptedException {
        long unreachableSince = 0;
        for (int round = 0; round < 100_000; round++) {
            long leftMs = waitMs < 0
                    ? WAIT_ROUND_MS
                    : waitMs - TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            if (leftMs <= 0) {
                return waitMs < 0 ? null : acquireNow(lease, owner);
            }
            long wait = Math.min(leftMs, WAIT_ROUND_MS);
            Connection conn;
            try {
                conn = client.connect();
            } catch (IOException e) {
                if (Thread.interrupted()) {
                    throw new InterruptedException();
                }
                // No node takes a connection: give up after as long as a command would wait.
                long now = System.nanoTime();
                if (unreachableSince == 0) {
                    unreachableSince = now;
                } else if (now - unreachableSince > TimeUnit.MILLISECONDS.toNanos(client.settings.commandTimeoutMs)) {
                    throw new FlockdException("no node of " + client.settings.nodes + " accepts a connection: " + e, e);
                }
                Thread.sleep(100);
                continue;
            }
            unreachableSince = 0;
            long sent = System.nanoTime();
            try {
                conn.readTimeout((int) (wait + WAIT_READ_MARGIN_MS));
                Object token = conn.call("FLOCK.ACQUIRE", name, lease, "WAIT", wait, "OWNER", owner);
                conn.close();
                if (token != null) {
                    return new Grant((Long) token, sent, true);
                }
                if (waitMs > 0 && wait >= leftMs) {
                    return null;
                }
            } catch (FlockdException.Reply e) {
                conn.close();
                if (!"CLUSTERDOWN".equals(e.code())) {
                    throw e;
                }
                client.failed(conn);
                Grant recovered = grantedToMe(owner, sent);
                if (recovered != null) {
                    return recovered;
                }
            } catch (IOException e) {
                // Never resent: the connection is closed (the server drops the waiter), and the
                // status says whether it was granted before that.
                client.failed(conn);
                boolean interrupted = e instanceof ClosedByInterruptException || Thread.interrupted();
                Grant recovered = grantedToMe(owner, sent);
                if (recovered != null) {
                    if (interrupted) {
                        Thread.currentThread().interrupt();
                    }
                    return recovered;
                }
                if (interrupted) {
                    throw new InterruptedException("interrupted while waiting for lock " + name);
                }
            }
        }
        return null;
    }

    /** The token of a holding of this lock by {@code owner}, per FLOCK.STATUS, or null. */
    private Grant grantedToMe(String owner, long sent) {
        Object reply;
        try {
            reply = client.executeUntil(System.nanoTime()
                    + TimeUnit.MILLISECONDS.toNanos(client.settings.commandTimeoutMs), "FLOCK.STATUS", name);
        } catch (FlockdException e) {
            return null; // nobody answers: if it was granted, its lease ends it
        }
        Object holder = field(reply, "owner");
        Object token = field(reply, "token");
        if (owner.equals(Resp.text(holder)) && token instanceof Long t) {
            return new Grant(t, sent, true);
        }
        return null;
    }

    /** A field of a RESP2 flat array or RESP3 map reply. */
    private static Object field(Object reply, String key) {
        if (reply instanceof Map<?, ?> map) {
            return map.get(key);
        }
        if (reply instanceof List<?> list) {
            for (int i = 0; i + 1 < list.size(); i += 2) {
                if (key.equals(Resp.text(list.get(i)))) {
                    return list.get(i + 1);
                }
            }
        }
        return null;
    }

    /** An {@code __flock__:<name>} message: {@code <event> <token>}. */
    void onEvent(String payload) {
        Holding h = holding;
        if (h == null || payload == null) {
            return;
        }
        int space = payload.indexOf(' ');
        if (space < 0 || !payload.substring(space + 1).equals(Long.toString(h.token))) {
            return;
        }
        switch (payload.substring(0, space)) {
            case "forcereleased" -> h.lose(LostReason.Kind.FORCE_RELEASED, null);
            case "expired" -> h.lose(LostReason.Kind.EXPIRED, null);
            default -> { }
        }
    }

    // ---- keeping it

    /** One holding: its token, its validity, its watchdog, and its loss. */
    private final class Holding {
        final Thread owner;
        final long token;
        final long leaseNanos;
        final long marginNanos;
        final boolean watchdog;
        /** Only the owner thread changes it. */
        int holds = 1;
        /** When the request behind the current validity was sent, plus the lease. */
        volatile long validUntil;
        final CompletableFuture<LostReason> lost = new CompletableFuture<>();
        /** Set at once when lost; {@link #lost} is completed from a worker so callbacks never stall the timer or the events. */
        volatile LostReason lostReason;
        private volatile boolean stopped;
        private ScheduledFuture<?> renewal;
        private ScheduledFuture<?> deadlineCheck;

        Holding(Thread owner, long token, long leaseMs, long sentNanos, boolean watchdog) {
            this.owner = owner;
            this.token = token;
            this.leaseNanos = TimeUnit.MILLISECONDS.toNanos(leaseMs);
            this.marginNanos = Math.min(leaseNanos / 10, TimeUnit.SECONDS.toNanos(2));
            this.watchdog = watchdog;
            this.validUntil = sentNanos + leaseNanos;
        }

        long deadline() {
            return validUntil - marginNanos;
        }

        synchronized void start() {
            scheduleDeadlineCheck();
            if (watchdog) {
                scheduleRenewal(validUntil - leaseNanos + leaseNanos / 3);
            }
        }

        /** Lost now, also by the clock (the timer may not have run since a pause). */
        boolean isLost() {
            if (lostReason == null && System.nanoTime() >= deadline()) {
                lose(LostReason.Kind.LEASE_RUNNING_OUT, null);
            }
            return lostReason != null;
        }

        synchronized void lose(LostReason.Kind kind, String detail) {
            if (stopped || lostReason != null) {
                return;
            }
            cancelTimers();
            if (client.events != null) {
                client.events.unlisten(FlockdFencedLock.this);
            }
            LostReason reason = new LostReason(kind, name, token, detail);
            lostReason = reason;
            try {
                client.workers.execute(() -> lost.complete(reason));
            } catch (java.util.concurrent.RejectedExecutionException e) {
                lost.complete(reason); // the client is closed: no worker left
            }
        }

        /** Unlocked (or replaced): no more renewals, and the loss is never told. */
        synchronized void stop() {
            if (stopped) {
                return;
            }
            stopped = true;
            cancelTimers();
            if (lostReason == null && client.events != null) {
                client.events.unlisten(FlockdFencedLock.this);
            }
        }

        private void cancelTimers() {
            if (renewal != null) {
                renewal.cancel(false);
            }
            if (deadlineCheck != null) {
                deadlineCheck.cancel(false);
            }
        }

        private synchronized void scheduleDeadlineCheck() {
            if (stopped || lostReason != null || client.isClosed()) {
                return;
            }
            long delay = Math.max(0, deadline() - System.nanoTime());
            deadlineCheck = client.timer.schedule(() -> {
                if (!isLost()) {
                    scheduleDeadlineCheck(); // renewed meanwhile: check the new deadline
                }
            }, delay, TimeUnit.NANOSECONDS);
        }

        private synchronized void scheduleRenewal(long atNanos) {
            if (stopped || lostReason != null || client.isClosed()) {
                return;
            }
            long delay = Math.max(0, atNanos - System.nanoTime());
            renewal = client.timer.schedule(() -> client.workers.execute(this::renew), delay, TimeUnit.NANOSECONDS);
        }

        /** One renewal, tried on the nodes until the deadline; the next one is scheduled from its send. */
        private void renew() {
            if (stopped || isLost()) {
                return;
            }
            long sent = System.nanoTime();
            try {
                Object reply = client.executeUntil(deadline(), "FLOCK.RENEW", name, token,
                        TimeUnit.NANOSECONDS.toMillis(leaseNanos));
                if (!Long.valueOf(1).equals(reply)) {
                    lose(LostReason.Kind.RENEWAL_REFUSED, "FLOCK.RENEW replied " + reply);
                    return;
                }
                synchronized (this) {
                    if (sent + leaseNanos > validUntil) {
                        validUntil = sent + leaseNanos;
                    }
                }
                scheduleRenewal(sent + leaseNanos / 3);
            } catch (FlockdException.Reply e) {
                lose(LostReason.Kind.RENEWAL_REFUSED, e.getMessage());
            } catch (FlockdException e) {
                // No node answered yet: try again soon; the deadline check tells the loss.
                scheduleRenewal(System.nanoTime() + Math.min(leaseNanos / 10, TimeUnit.MILLISECONDS.toNanos(250)));
            }
        }
    }
}
