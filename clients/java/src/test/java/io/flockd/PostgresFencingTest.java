package io.flockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * docs/fencing.md's fenced UPDATE through JDBC against a throwaway PostgreSQL: a holder process
 * paused (SIGSTOP) past its lease writes late and matches 0 rows, while the next holder's write
 * with a higher token lands. PostgreSQL runs as the postgres user when the test runs as root, on
 * a free loopback port in a temporary directory, and is stopped by its pid.
 */
class PostgresFencingTest {
    static final String FENCED_UPDATE = "UPDATE orders SET status = ?, fence_token = ? WHERE id = ? AND fence_token <= ?";

    static int update(Connection db, String status, long token) throws SQLException {
        try (PreparedStatement st = db.prepareStatement(FENCED_UPDATE)) {
            st.setString(1, status);
            st.setLong(2, token);
            st.setInt(3, 42);
            st.setLong(4, token);
            return st.executeUpdate();
        }
    }

    /** The holder that gets paused, in a JVM of its own: args are the flockd node and the JDBC URL. */
    public static void main(String[] args) throws Exception {
        try (FlockdClient client = FlockdClient.builder().nodes(args[0]).lockWatchdogTimeout(Duration.ofSeconds(1)).build();
                Connection db = DriverManager.getConnection(args[1])) {
            FlockdFencedLock lock = client.getFencedLock("orders:42");
            long token = lock.lockAndGetToken();
            System.out.println("token " + token + " rows " + update(db, "paid (first holder, on time)", token));
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            in.readLine(); // paused (SIGSTOP) here by the test, then resumed and told to go on
            // A careless holder writes without asking whether it still holds the lock: the row's
            // fence refuses it all the same.
            int late = update(db, "refunded (first holder, late)", token);
            System.out.println("late rows " + late + " held " + lock.isHeldByCurrentThread());
        }
    }

    static Path pgBin(String name) throws Exception {
        try (Stream<Path> versions = Files.list(Path.of("/usr/lib/postgresql"))) {
            return versions.map(v -> v.resolve("bin").resolve(name)).filter(Files::isExecutable)
                    .max(Comparator.naturalOrder()).orElseThrow(() -> new AssertionError("no " + name));
        }
    }

    static boolean isRoot() {
        return "root".equals(System.getProperty("user.name"));
    }

    static List<String> asPostgres(String... cmd) {
        List<String> full = new ArrayList<>();
        if (isRoot()) {
            full.addAll(List.of("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"));
        }
        full.addAll(Arrays.asList(cmd));
        return full;
    }

    static void signal(Process p, String sig) throws Exception {
        Process kill = new ProcessBuilder("kill", "-" + sig, Long.toString(p.pid())).inheritIO().start();
        assertTrue(kill.waitFor(10, TimeUnit.SECONDS) && kill.exitValue() == 0, "kill -" + sig);
    }

    @Test
    void aHolderPausedPastItsLeaseWritesLateAndMatchesNoRow() throws Exception {
        Path dir = Files.createTempDirectory("flockd-java-pg-");
        Process postgres = null;
        Process holder = null;
        try (Flockd server = Flockd.start()) {
            Path data = dir.resolve("data");
            Files.createDirectory(data);
            if (isRoot()) {
                assertEquals(0, new ProcessBuilder("chown", "-R", "postgres:postgres", dir.toString()).start().waitFor());
            }
            Process initdb = new ProcessBuilder(asPostgres(pgBin("initdb").toString(), "-D", data.toString(), "-A", "trust",
                    "-U", "flockd", "-E", "UTF8", "--no-sync")).redirectErrorStream(true)
                    .redirectOutput(dir.resolve("initdb.log").toFile()).start();
            assertTrue(initdb.waitFor(120, TimeUnit.SECONDS), "initdb finished");
            assertEquals(0, initdb.exitValue(), () -> TlsAuthTest.read(dir.resolve("initdb.log")));
            int port = Flockd.freePorts(1)[0];
            postgres = new ProcessBuilder(asPostgres(pgBin("postgres").toString(), "-D", data.toString(),
                    "-p", Integer.toString(port), "-k", data.toString(), "-c", "listen_addresses=127.0.0.1",
                    "-c", "fsync=off")).redirectErrorStream(true).redirectOutput(dir.resolve("pg.log").toFile()).start();
            String url = "jdbc:postgresql://127.0.0.1:" + port + "/postgres?user=flockd";
            Connection db = null;
            for (int i = 0; i < 300 && db == null; i++) {
                try {
                    db = DriverManager.getConnection(url);
                } catch (SQLException e) {
                    assertTrue(postgres.isAlive(), () -> "postgres exited: " + TlsAuthTest.read(dir.resolve("pg.log")));
                    Thread.sleep(100);
                }
            }
            assertNotNull(db, "PostgreSQL accepted no connection in 30 s");
            try (Connection c = db; Statement st = c.createStatement()) {
                st.execute("CREATE TABLE orders (id INT PRIMARY KEY, status TEXT NOT NULL, "
                        + "fence_token BIGINT NOT NULL DEFAULT 0)");
                st.execute("INSERT INTO orders (id, status) VALUES (42, 'new')");

                holder = new ProcessBuilder("java", "-cp", System.getenv("FLOCKD_JAVA_TEST_CP"),
                        PostgresFencingTest.class.getName(), server.address(), url)
                        .redirectError(ProcessBuilder.Redirect.INHERIT).start();
                BufferedReader out = new BufferedReader(new InputStreamReader(holder.getInputStream(), StandardCharsets.UTF_8));
                String first = out.readLine();
                assertNotNull(first, "the holder printed nothing");
                String[] words = first.split(" ");
                long staleToken = Long.parseLong(words[1]);
                assertEquals("1", words[3], "the first holder's write on time lands: " + first);

                signal(holder, "STOP");
                try (FlockdClient client = FlockdClient.builder().nodes(server.address()).build()) {
                    FlockdFencedLock next = client.getFencedLock("orders:42");
                    Long token = next.tryLockAndGetToken(10, TimeUnit.SECONDS);
                    assertNotNull(token, "granted once the paused holder's lease ran out");
                    assertTrue(token > staleToken);
                    assertEquals(1, update(c, "shipped", token), "the next holder's write lands");
                    signal(holder, "CONT");
                    try (Writer w = new OutputStreamWriter(holder.getOutputStream(), StandardCharsets.UTF_8)) {
                        w.write("go\n");
                    }
                    String late = out.readLine();
                    assertEquals("late rows 0 held false", late, "the paused holder's late write matches no row");
                    assertTrue(holder.waitFor(30, TimeUnit.SECONDS));
                    try (ResultSet row = st.executeQuery("SELECT status, fence_token FROM orders WHERE id = 42")) {
                        assertTrue(row.next());
                        assertEquals("shipped", row.getString(1));
                        assertEquals((long) token, row.getLong(2));
                    }
                    next.unlock();
                }
            }
        } finally {
            if (holder != null && holder.isAlive()) {
                holder.destroyForcibly();
                holder.waitFor(10, TimeUnit.SECONDS);
            }
            if (postgres != null) {
                // setpriv execs: this pid is the postmaster. SIGINT is its fast shutdown.
                signal(postgres, "INT");
                if (!postgres.waitFor(10, TimeUnit.SECONDS)) {
                    postgres.destroyForcibly();
                    postgres.waitFor(10, TimeUnit.SECONDS);
                }
            }
            Flockd.deleteTree(dir);
        }
    }
}
