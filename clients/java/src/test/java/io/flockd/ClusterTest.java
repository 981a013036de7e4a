package io.flockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Through a 3-node cluster: the leader is killed under a held lock. */
class ClusterTest {
    @Test
    void killingTheLeaderDoesNotLoseTheLock() throws Exception {
        try (Flockd.Cluster cluster = new Flockd.Cluster(3)) {
            int leader = cluster.leader();
            // The leader first, so the client's connections are to the node that dies.
            List<String> nodes = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                nodes.add(cluster.nodes.get((leader + i) % 3).address());
            }
            try (FlockdClient client = FlockdClient.builder().nodes(nodes.toArray(new String[0]))
                    .lockWatchdogTimeout(Duration.ofSeconds(6)).build()) {
                FlockdFencedLock lock = client.getFencedLock("cluster:1");
                long token = lock.lockAndGetToken();
                assertTrue(lock.fenceSet("cluster:1:state", "before"));
                long killed = System.nanoTime();
                cluster.nodes.get(leader).kill9();
                // Past two whole leases: only renewals through the surviving nodes keep it.
                Thread.sleep(13_000);
                assertFalse(lock.lostFuture().isDone(), () -> "lost: " + lock.lostFuture().join());
                assertTrue(lock.isHeldByCurrentThread());
                int newLeader = cluster.leader();
                System.out.println("cluster: leader " + (leader + 1) + " killed, node " + (newLeader + 1)
                        + " leads; the lock held " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed)
                        + " ms after the kill with a 6 s lease");
                try (Raw raw = new Raw(cluster.nodes.get(newLeader).port)) {
                    List<?> st = (List<?>) raw.call("FLOCK.STATUS", "cluster:1");
                    assertEquals(token, FencedLockTest.field(st, "token"));
                    assertTrue((Long) FencedLockTest.field(st, "ttl") > 0);
                    assertNull(raw.call("FLOCK.ACQUIRE", "cluster:1", 1000), "still held for anyone else");
                }
                assertTrue(lock.fenceSet("cluster:1:state", "after"));
                lock.unlock();
                assertFalse(lock.isLocked());
            }
        }
    }
}
