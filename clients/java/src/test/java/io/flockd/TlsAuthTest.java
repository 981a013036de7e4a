package io.flockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.Test;

/**
 * TLS (mutual, with certificates made by openssl as docs/operations.md shows) and AUTH with a
 * user and password from an aclfile: the lock, its events and its fenced writes all go through.
 */
class TlsAuthTest {
    static void run(Path dir, String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true)
                .redirectOutput(dir.resolve("openssl.log").toFile()).start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("openssl did not finish: " + String.join(" ", cmd));
        }
        assertEquals(0, p.exitValue(), () -> String.join(" ", cmd) + ": " + read(dir.resolve("openssl.log")));
    }

    static String read(Path p) {
        try {
            return Files.readString(p);
        } catch (Exception e) {
            return e.toString();
        }
    }

    static Path certificates() throws Exception {
        Path dir = Files.createTempDirectory("flockd-java-tls-");
        run(dir, "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-days", "2", "-subj", "/CN=flockd test CA", "-keyout", "ca.key", "-out", "ca.crt");
        Files.writeString(dir.resolve("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
        Files.writeString(dir.resolve("client.ext"), "extendedKeyUsage=clientAuth\n");
        for (String who : new String[] {"server", "client"}) {
            run(dir, "openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=flockd test " + who, "-keyout", who + ".key", "-out", who + ".csr");
            run(dir, "openssl", "x509", "-req", "-in", who + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", who + ".ext", "-out", who + ".crt");
        }
        Files.writeString(dir.resolve("users.acl"),
                "user default off\nuser orders on >orders-secret ~orders:* &__flock__:orders:* +@flock +@fence +@pubsub +ping\n"
                        + "user ops on >ops-secret ~* &* +@all\n");
        return dir;
    }

    @Test
    void aLockOverMutualTlsWithAUserAndPassword() throws Exception {
        Path certs = certificates();
        int tlsPort = Flockd.freePorts(1)[0];
        try (Flockd server = Flockd.start("--tls-port", Integer.toString(tlsPort), "--tls-only", "yes",
                "--tls-cert-file", certs.resolve("server.crt").toString(),
                "--tls-key-file", certs.resolve("server.key").toString(),
                "--tls-ca-cert-file", certs.resolve("ca.crt").toString(),
                "--aclfile", certs.resolve("users.acl").toString())) {
            SSLContext tls = FlockdClient.sslContextFromPem(certs.resolve("ca.crt"), certs.resolve("client.crt"),
                    certs.resolve("client.key"));
            String node = "127.0.0.1:" + tlsPort;
            try (FlockdClient client = FlockdClient.builder().nodes(node).tls(tls).auth("orders", "orders-secret").build();
                    FlockdClient ops = FlockdClient.builder().nodes(node).tls(tls).auth("ops", "ops-secret").build()) {
                FlockdFencedLock lock = client.getFencedLock("orders:1042");
                long token = lock.lockAndGetToken();
                assertTrue(lock.fenceSet("orders:1042:state", "paid"));
                assertEquals(token, (long) (Long) ops.execute("FENCE.TOKEN", "orders:1042:state"));
                // The event comes over the subscriber's own TLS connection, as user orders.
                assertTrue(ops.getFencedLock("orders:1042").forceUnlock());
                LostReason why = lock.lostFuture().get(5, TimeUnit.SECONDS);
                assertEquals(LostReason.Kind.FORCE_RELEASED, why.kind());
                // orders may not touch other names.
                FlockdException.Reply denied = assertThrows(FlockdException.Reply.class,
                        () -> client.getFencedLock("invoice:1").tryLockAndGetToken());
                assertEquals("NOPERM", denied.code());
            }
            try (FlockdClient wrong = FlockdClient.builder().nodes(node).tls(tls).auth("orders", "nope").build()) {
                FlockdException.Reply e = assertThrows(FlockdException.Reply.class,
                        () -> wrong.getFencedLock("orders:1").tryLockAndGetToken());
                assertEquals("WRONGPASS", e.code());
            }
            // Without the CA the client does not trust the server: no node answers.
            SSLContext untrusting = SSLContext.getInstance("TLS");
            untrusting.init(null, null, null);
            try (FlockdClient stranger = FlockdClient.builder().nodes(node).tls(untrusting)
                    .auth("orders", "orders-secret").build()) {
                assertThrows(FlockdException.class, () -> stranger.execute("PING"));
            }
            // The server logs the failed handshake when it sees the client hang up, which on a busy
            // machine can be a moment after the client gave up: look for up to 10 s.
            boolean logged = false;
            for (int i = 0; i < 100 && !logged; i++) {
                List<String> log = Files.readAllLines(server.log);
                logged = log.stream().anyMatch(l -> l.contains("TLS handshake failed"));
                if (!logged) {
                    Thread.sleep(100);
                }
            }
            assertTrue(logged, "the server saw the refusal");
        } finally {
            Flockd.deleteTree(certs);
        }
    }
}
