package io.flockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** FlockdFencedLock against one real flockd per test. */
class FencedLockTest {
    Flockd server;
    final List<FlockdClient> clients = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        server = Flockd.start();
    }

    @AfterEach
    void stop() throws Exception {
        clients.forEach(FlockdClient::close);
        server.close();
    }

    FlockdClient client(FlockdClient.Builder b) {
        FlockdClient c = b.nodes(server.address()).build();
        clients.add(c);
        return c;
    }

    FlockdClient client() {
        return client(FlockdClient.builder());
    }

    static List<?> status(Raw raw, String name) throws Exception {
        return (List<?>) raw.call("FLOCK.STATUS", name);
    }

    static Object field(List<?> status, String key) {
        for (int i = 0; i + 1 < status.size(); i += 2) {
            if (key.equals(Resp.text(status.get(i)))) {
                return status.get(i + 1);
            }
        }
        throw new AssertionError("no field " + key + " in " + status);
    }

    @Test
    void grantsTheLockWithItsToken() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:1");
        Long token = lock.lockAndGetToken();
        assertNotNull(token);
        assertTrue(token > 0);
        assertTrue(lock.isHeldByCurrentThread());
        assertEquals(token, lock.getToken());
        assertTrue(lock.remainTimeToLive() > 25_000, "the watchdog's 30 s lease");
        try (Raw raw = new Raw(server.port)) {
            List<?> st = status(raw, "order:1");
            assertEquals(1L, field(st, "locked"));
            assertEquals(token, field(st, "token"));
        }
        assertTrue(lock.fenceSet("order:1:state", "paid"));
        lock.unlock();
        assertFalse(lock.isHeldByCurrentThread());
        assertEquals(-2L, lock.remainTimeToLive());
        assertFalse(lock.isLocked());
        assertEquals(token, lock.getToken(), "not held: the name's latest token, as Redisson's counter");
        Long again = lock.tryLockAndGetToken();
        assertTrue(again > token);
        lock.unlock();
    }

    @Test
    void aSecondClientWaitsAndGetsAHigherToken() throws Exception {
        FlockdFencedLock first = client().getFencedLock("order:2");
        FlockdFencedLock second = client().getFencedLock("order:2");
        long t1 = first.lockAndGetToken();
        assertNull(second.tryLockAndGetToken(), "held: not granted at once");
        CompletableFuture<Long> waiter = CompletableFuture.supplyAsync(() -> {
            try {
                return second.tryLockAndGetToken(20, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
        Thread.sleep(1000);
        assertFalse(waiter.isDone(), "the second client waits while the first holds");
        first.unlock();
        Long t2 = waiter.get(15, TimeUnit.SECONDS);
        assertNotNull(t2);
        assertTrue(t2 > t1, t2 + " > " + t1);
        // A bounded wait on a held lock comes back null, after about the wait.
        FlockdFencedLock third = client().getFencedLock("order:2");
        long start = System.nanoTime();
        assertNull(third.tryLockAndGetToken(700, TimeUnit.MILLISECONDS));
        assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(650));
    }

    /** Why the lock was lost, for a failure's message (its future completes on a worker). */
    static Object lostReason(FlockdFencedLock lock) {
        try {
            return lock.lostFuture().get(500, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            return "not lost yet (" + e + ")";
        }
    }

    /** The holder (a raw connection, lease 20 s) gives the lock back after {@code delayMs}. */
    Thread releaseLater(String name, long token, long delayMs) {
        Thread t = new Thread(() -> {
            try (Raw raw = new Raw(server.port)) {
                Thread.sleep(delayMs);
                raw.call("FLOCK.RELEASE", name, token);
            } catch (Exception e) {
                // the test's assertions tell
            }
        });
        t.setDaemon(true);
        t.start();
        return t;
    }

    /**
     * Issue 35: validity was counted from the blocking acquire's send, so a grant after a wait
     * longer than the lease was reported lost at once. Now such a grant is renewed before it is
     * handed over, and counts from that renewal's send.
     */
    @Test
    void aLockGrantedAfterAWaitLongerThanItsLeaseIsKept() throws Exception {
        FlockdClient c = client(FlockdClient.builder().lockWatchdogTimeout(Duration.ofMillis(1500)));
        FlockdFencedLock lock = c.getFencedLock("waited");
        try (Raw raw = new Raw(server.port)) {
            long holder = (Long) raw.call("FLOCK.ACQUIRE", "waited", 20_000);
            Thread releaser = releaseLater("waited", holder, 3000);
            long start = System.nanoTime();
            Long token = lock.tryLockAndGetToken(6, TimeUnit.SECONDS);
            long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            releaser.join(10_000);
            assertNotNull(token, "granted when the holder released");
            assertTrue(waitedMs > 1500, "it waited longer than its lease: " + waitedMs + " ms");
            assertTrue(lock.isHeldByCurrentThread(), () -> "reported lost at grant: " + lostReason(lock));
            Thread.sleep(2 * 1500 / 3 + 600); // two renewal periods and some slack
            assertFalse(lock.lostFuture().isDone(), "reported lost: " + lock.lostFuture().getNow(null));
            assertTrue(lock.isHeldByCurrentThread());
            assertTrue((Long) raw.call("FLOCK.TTL", "waited") > 0);
            List<?> st = status(raw, "waited");
            assertEquals(1L, field(st, "locked"));
            assertEquals(token, field(st, "token"));
            lock.unlock();
            assertEquals(-2L, raw.call("FLOCK.TTL", "waited"), "released");
        }
    }

    /** The same with a lease time of its own (no watchdog): not lost at grant either. */
    @Test
    void aLockWithALeaseTimeGrantedAfterALongerWaitIsNotLostAtGrant() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("waited-lease");
        try (Raw raw = new Raw(server.port)) {
            long holder = (Long) raw.call("FLOCK.ACQUIRE", "waited-lease", 20_000);
            Thread releaser = releaseLater("waited-lease", holder, 3000);
            Long token = lock.tryLockAndGetToken(6000, 1500, TimeUnit.MILLISECONDS);
            releaser.join(10_000);
            assertNotNull(token);
            assertTrue(lock.isHeldByCurrentThread(), () -> "reported lost at grant: " + lostReason(lock));
            assertEquals(token, field(status(raw, "waited-lease"), "token"));
            lock.unlock();
        }
    }

    /**
     * The holding is gone when the renewal after a long wait arrives (here: removed just before
     * it is sent, as if the lease ran out between the grant and its reply): not granted (null),
     * never a lock that is lost already.
     */
    @Test
    void aLateGrantWhoseLeaseRanOutBeforeTheRenewalIsNotGranted() throws Exception {
        FlockdClient c = client(FlockdClient.builder().lockWatchdogTimeout(Duration.ofMillis(600)));
        try (Raw raw = new Raw(server.port); Raw admin = new Raw(server.port)) {
            long holder = (Long) raw.call("FLOCK.ACQUIRE", "late", 20_000);
            Thread releaser = releaseLater("late", holder, 1000);
            FlockdFencedLock.testHookBeforeRenewAtOnce = () -> {
                try {
                    admin.call("FLOCK.FORCERELEASE", "late");
                } catch (java.io.IOException e) {
                    throw new RuntimeException(e);
                }
            };
            try {
                assertNull(c.getFencedLock("late").tryLockAndGetToken(5, TimeUnit.SECONDS));
            } finally {
                FlockdFencedLock.testHookBeforeRenewAtOnce = null;
            }
            releaser.join(10_000);
            assertEquals(-2L, raw.call("FLOCK.TTL", "late"));
        }
    }

    @Test
    void aBlockingAcquireLongerThanTheCommandTimeoutIsSentOnce() throws Exception {
        FlockdClient c = client(FlockdClient.builder().commandTimeout(Duration.ofMillis(500)));
        try (Raw holder = new Raw(server.port); Raw monitor = new Raw(server.port)) {
            assertEquals(1L, holder.call("FLOCK.ACQUIRE", "order:14", 60_000));
            assertEquals("OK", monitor.call("MONITOR"));
            long start = System.nanoTime();
            assertNull(c.getFencedLock("order:14").tryLockAndGetToken(2, TimeUnit.SECONDS), "held for the whole wait");
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(ms >= 1900, "came back after the wait, not at the 500 ms command timeout: " + ms + " ms");
            holder.call("ECHO", "end-of-test-marker");
            int acquires = 0;
            for (int i = 0; i < 1000; i++) {
                String line = Resp.text(monitor.read());
                if (line.contains("\"FLOCK.ACQUIRE\"") && line.contains("\"WAIT\"")) {
                    acquires++;
                }
                if (line.contains("end-of-test-marker")) {
                    break;
                }
            }
            assertEquals(1, acquires, "one blocking acquire sent, never resent");
        }
    }

    @Test
    void theWatchdogKeepsAOneSecondLeaseForFiveSeconds() throws Exception {
        FlockdClient c = client(FlockdClient.builder().lockWatchdogTimeout(Duration.ofSeconds(1)));
        FlockdFencedLock lock = c.getFencedLock("order:3");
        long token = lock.lockAndGetToken();
        Thread.sleep(5000);
        assertFalse(lock.lostFuture().isDone(), () -> "lost: " + lock.lostFuture().join());
        assertTrue(lock.isHeldByCurrentThread());
        try (Raw raw = new Raw(server.port)) {
            List<?> st = status(raw, "order:3");
            assertEquals(token, field(st, "token"));
            assertTrue((Long) field(st, "ttl") > 0);
        }
        lock.unlock(); // would throw IllegalMonitorStateException had the lease run out
    }

    @Test
    void anExplicitLeaseIsNotRenewedAndUnlockAfterItThrows() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:4");
        long token = lock.lockAndGetToken(400, TimeUnit.MILLISECONDS);
        LostReason why = lock.lostFuture().get(5, TimeUnit.SECONDS);
        assertEquals(token, why.token());
        assertTrue(why.kind() == LostReason.Kind.LEASE_RUNNING_OUT || why.kind() == LostReason.Kind.EXPIRED, why.toString());
        assertFalse(lock.isHeldByCurrentThread());
        Thread.sleep(600);
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void forceReleaseFromAnotherConnectionIsToldWithin100msOfTheEvent() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:5");
        long token = lock.lockAndGetToken();
        AtomicLong lostAt = new AtomicLong();
        lock.lostFuture().thenRun(() -> lostAt.set(System.nanoTime()));
        try (Raw listener = new Raw(server.port); Raw admin = new Raw(server.port)) {
            listener.call("SUBSCRIBE", "__flock__:order:5");
            assertEquals(1L, admin.call("FLOCK.FORCERELEASE", "order:5"));
            long eventAt;
            while (true) {
                List<?> msg = (List<?>) listener.read();
                if ("message".equals(Resp.text(msg.get(0)))
                        && ("forcereleased " + token).equals(Resp.text(msg.get(2)))) {
                    eventAt = System.nanoTime();
                    break;
                }
            }
            LostReason why = lock.lostFuture().get(5, TimeUnit.SECONDS);
            assertEquals(LostReason.Kind.FORCE_RELEASED, why.kind());
            long ms = TimeUnit.NANOSECONDS.toMillis(lostAt.get() - eventAt);
            System.out.println("force-release: lostFuture completed " + ms + " ms after the event reached a subscriber");
            assertTrue(ms <= 100, ms + " ms after the event");
        }
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void withoutTheSubscriptionARefusedRenewalTellsWithinOneRenewalInterval() throws Exception {
        FlockdClient c = client(FlockdClient.builder().events(false).lockWatchdogTimeout(Duration.ofSeconds(3)));
        FlockdFencedLock lock = c.getFencedLock("order:6");
        lock.lockAndGetToken();
        long forced;
        try (Raw admin = new Raw(server.port)) {
            assertEquals(1L, admin.call("FLOCK.FORCERELEASE", "order:6"));
            forced = System.nanoTime();
        }
        LostReason why = lock.lostFuture().get(10, TimeUnit.SECONDS);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - forced);
        System.out.println("force-release without subscription: told after " + ms + " ms (renewal interval 1000 ms)");
        assertEquals(LostReason.Kind.RENEWAL_REFUSED, why.kind(), why.toString());
        assertTrue(why.detail().startsWith("NOTOWNER"), why.detail());
        assertTrue(ms <= 1000 + 500, ms + " ms: more than one renewal interval (1 s) and slack");
    }

    @Test
    void killingTheServerIsToldBeforeTheLeaseEnds() throws Exception {
        FlockdClient c = client(FlockdClient.builder().lockWatchdogTimeout(Duration.ofSeconds(3)));
        FlockdFencedLock lock = c.getFencedLock("order:7");
        long sent = System.nanoTime();
        lock.lockAndGetToken();
        Thread.sleep(300);
        server.kill9();
        LostReason why = lock.lostFuture().get(10, TimeUnit.SECONDS);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - sent);
        System.out.println("kill -9: told " + ms + " ms after the acquire was sent (lease 3000 ms): " + why);
        assertEquals(LostReason.Kind.LEASE_RUNNING_OUT, why.kind());
        assertTrue(ms < 3000, ms + " ms: not before the lease ended");
        assertThrows(FlockdException.LockLost.class, () -> lock.fenceSet("k", "v"));
    }

    @Test
    void aFencedWriteAfterTheLossSendsNothing() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:8");
        lock.lockAndGetToken();
        try (Raw monitor = new Raw(server.port); Raw admin = new Raw(server.port)) {
            assertEquals("OK", monitor.call("MONITOR"));
            assertTrue(lock.fenceSet("order:8:state", "before"));
            assertEquals(1L, admin.call("FLOCK.FORCERELEASE", "order:8"));
            lock.lostFuture().get(5, TimeUnit.SECONDS);
            FlockdException.LockLost refused =
                    assertThrows(FlockdException.LockLost.class, () -> lock.fenceSet("order:8:state", "after"));
            assertEquals(LostReason.Kind.FORCE_RELEASED, refused.reason().kind());
            admin.call("ECHO", "end-of-test-marker");
            int fenceSets = 0;
            for (int i = 0; i < 1000; i++) {
                String line = Resp.text(monitor.read());
                if (line.contains("\"FENCE.SET\"")) {
                    fenceSets++;
                    assertTrue(line.contains("\"before\""), "a FENCE.SET after the loss: " + line);
                }
                if (line.contains("end-of-test-marker")) {
                    break;
                }
            }
            assertEquals(1, fenceSets, "MONITOR saw the write before the loss, and none after");
        }
        try (Raw raw = new Raw(server.port)) {
            assertEquals("before", Resp.text(raw.call("FENCE.GET", "order:8:state")));
        }
    }

    @Test
    void reentrancyIsPerThreadWithTheTokenOfTheOutermostAcquisition() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:9");
        long token = lock.lockAndGetToken();
        assertEquals(token, lock.lockAndGetToken());
        assertEquals(token, (long) lock.tryLockAndGetToken(1, TimeUnit.SECONDS));
        assertEquals(3, lock.getHoldCount());
        // Another thread, through the same object, is another holder: it waits, and cannot unlock.
        AtomicReference<Object> other = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                other.set(lock.tryLockAndGetToken());
                lock.unlock();
                other.set("unlocked");
            } catch (IllegalMonitorStateException e) {
                other.set(e);
            }
        });
        t.start();
        t.join(10_000);
        assertTrue(other.get() instanceof IllegalMonitorStateException, String.valueOf(other.get()));
        lock.unlock();
        lock.unlock();
        assertTrue(lock.isLocked(), "one hold left");
        assertTrue(lock.isHeldByCurrentThread());
        lock.unlock();
        assertFalse(lock.isLocked());
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
        try (Raw raw = new Raw(server.port)) {
            assertEquals(token, raw.call("FLOCK.TOKEN", "order:9"), "reentrant holds sent no acquire");
        }
    }

    @Test
    void aThreadThatTakesOverThroughTheSameObjectStillHearsItsEvents() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:15");
        long first = lock.lockAndGetToken();
        CompletableFuture<LostReason> waiterLost = new CompletableFuture<>();
        AtomicLong waiterToken = new AtomicLong();
        Thread waiter = new Thread(() -> {
            waiterToken.set(lock.lockAndGetToken());
            lock.lostFuture().thenAccept(waiterLost::complete);
        });
        waiter.start();
        try (Raw raw = new Raw(server.port)) {
            for (int i = 0; i < 100 && !Long.valueOf(1).equals(field(status(raw, "order:15"), "waiters")); i++) {
                Thread.sleep(20);
            }
            // The holder's unlock must not end the subscription that the waiting thread needs.
            lock.unlock();
            waiter.join(10_000);
            assertTrue(waiterToken.get() > first);
            assertEquals(1L, raw.call("FLOCK.FORCERELEASE", "order:15"));
            // Told by the event: the next renewal of this 30 s lease is 10 s away.
            assertEquals(LostReason.Kind.FORCE_RELEASED, waiterLost.get(5, TimeUnit.SECONDS).kind());
        }
    }

    @Test
    void anInterruptedWaiterIsDroppedByTheServer() throws Exception {
        FlockdFencedLock holder = client().getFencedLock("order:10");
        FlockdFencedLock waiter = client().getFencedLock("order:10");
        holder.lockAndGetToken();
        AtomicReference<Throwable> outcome = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                waiter.lockInterruptibly();
                outcome.set(new AssertionError("granted"));
            } catch (Throwable e) {
                outcome.set(e);
            }
        });
        t.start();
        try (Raw raw = new Raw(server.port)) {
            for (int i = 0; i < 100 && !Long.valueOf(1).equals(field(status(raw, "order:10"), "waiters")); i++) {
                Thread.sleep(20);
            }
            assertEquals(1L, field(status(raw, "order:10"), "waiters"));
            t.interrupt();
            t.join(10_000);
            assertTrue(outcome.get() instanceof InterruptedException, String.valueOf(outcome.get()));
            for (int i = 0; i < 100 && !Long.valueOf(0).equals(field(status(raw, "order:10"), "waiters")); i++) {
                Thread.sleep(20);
            }
            assertEquals(0L, field(status(raw, "order:10"), "waiters"), "the closed connection's waiter is gone");
        }
        holder.unlock();
    }

    @Test
    void forceUnlockAndLostFutureOfTheHolder() throws Exception {
        FlockdFencedLock lock = client().getFencedLock("order:11");
        lock.lockAndGetToken();
        FlockdFencedLock admin = client().getFencedLock("order:11");
        assertTrue(admin.forceUnlock());
        assertEquals(LostReason.Kind.FORCE_RELEASED, lock.lostFuture().get(5, TimeUnit.SECONDS).kind());
        assertFalse(admin.forceUnlock(), "free now");
        assertThrows(IllegalMonitorStateException.class, admin::lostFuture);
        assertThrows(UnsupportedOperationException.class, lock::newCondition);
    }

    @Test
    void theLostFutureNeverCompletesAfterUnlock() throws Exception {
        FlockdClient c = client(FlockdClient.builder().lockWatchdogTimeout(Duration.ofSeconds(1)));
        FlockdFencedLock lock = c.getFencedLock("order:12");
        lock.lockAndGetToken();
        CompletableFuture<LostReason> lost = lock.lostFuture();
        lock.unlock();
        Thread.sleep(1500);
        assertFalse(lost.isDone());
        assertThrows(java.util.concurrent.TimeoutException.class, () -> lost.get(10, TimeUnit.MILLISECONDS));
    }

    @Test
    void errorsAreTyped() {
        FlockdFencedLock lock = client().getFencedLock("order:13");
        FlockdException.Reply e = assertThrows(FlockdException.Reply.class,
                () -> lock.lockAndGetToken(Long.MAX_VALUE / 2, TimeUnit.MILLISECONDS));
        assertEquals("ERR", e.code());
        FlockdClient nobody = FlockdClient.builder().nodes("127.0.0.1:1").build();
        clients.add(nobody);
        assertThrows(FlockdException.class, () -> nobody.getFencedLock("x").tryLockAndGetToken());
    }

    static void unwrap(ExecutionException e) throws Exception {
        throw (Exception) e.getCause();
    }
}
