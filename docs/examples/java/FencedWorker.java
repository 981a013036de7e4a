// A fenced worker for flockd with Jedis (redis.clients:jedis 5.x): acquire a lock (waiting in
// line if it is held), do the work guarded by the fencing token, release.
//
//   FLOCKD_URL=redis://127.0.0.1:6390 java FencedWorker.java   (with jedis on the classpath)

import java.net.URI;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.util.SafeEncoder;

public class FencedWorker {
    enum Cmd implements ProtocolCommand {
        ACQUIRE("FLOCK.ACQUIRE"), RENEW("FLOCK.RENEW"), RELEASE("FLOCK.RELEASE"),
        FENCE_SET("FENCE.SET"), FENCE_GET("FENCE.GET");
        private final byte[] raw;
        Cmd(String name) { raw = SafeEncoder.encode(name); }
        @Override public byte[] getRaw() { return raw; }
    }

    static final String LOCK = "orders:42";
    static final String RESOURCE = "res:orders:42";
    static final int LEASE_MS = 10_000;
    static final int WAIT_MS = 5_000;

    public static void main(String[] args) {
        URI url = URI.create(System.getenv().getOrDefault("FLOCKD_URL", "redis://127.0.0.1:6390"));
        // 5 s connect and socket timeout for ordinary commands. sendBlockingCommand reads with the
        // blocking socket timeout instead (blockingSocketTimeoutMillis, default 0: no limit), so
        // the WAIT is not cut short; plain sendCommand would give up after 5 s.
        try (Jedis jedis = new Jedis(url, 5_000)) {
            Object reply = jedis.sendBlockingCommand(Cmd.ACQUIRE, LOCK, "" + LEASE_MS, "WAIT", "" + WAIT_MS);
            if (reply == null) {
                System.out.println("lock busy, giving up");
                System.exit(1);
            }
            long token = (Long) reply;
            System.out.println("acquired " + LOCK + " with token " + token);
            try {
                long stored = (Long) jedis.sendCommand(Cmd.FENCE_SET, RESOURCE, "" + token, "written by token " + token);
                if (stored != 1) {
                    System.out.println("fenced out: a newer holder exists, stopping");
                    return;
                }
                jedis.sendCommand(Cmd.RENEW, LOCK, "" + token, "" + LEASE_MS); // watchdog-style extension
                System.out.println("stored: " + SafeEncoder.encode((byte[]) jedis.sendCommand(Cmd.FENCE_GET, RESOURCE)));
            } finally {
                try {
                    jedis.sendCommand(Cmd.RELEASE, LOCK, "" + token);
                } catch (JedisDataException e) { // NOTOWNER: the lease ran out while we worked
                    System.out.println("release failed: " + e.getMessage());
                }
            }
        }
    }
}
