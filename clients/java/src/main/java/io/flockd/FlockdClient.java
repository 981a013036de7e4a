package io.flockd;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import javax.net.ssl.TrustManagerFactory;

/**
 * Connections to a flockd server or cluster, and the threads that keep its locks.
 *
 * <pre>{@code
 * try (FlockdClient client = FlockdClient.builder().nodes("127.0.0.1:6390").build()) {
 *     FlockdFencedLock lock = client.getFencedLock("order:1042");
 *     ...
 * }
 * }</pre>
 *
 * <p>Commands that do not block go through a small pool of connections to one node at a time.
 * A node that refuses the connection, or answers {@code -CLUSTERDOWN}, is left for the next in
 * the list, and an idempotent command (a renewal, a release, a fenced write, a read) is tried
 * there. A blocking acquire ({@code WAIT}) gets a connection of its own with a read timeout
 * longer than its wait, and is never sent twice (see {@link FlockdFencedLock}).
 */
public final class FlockdClient implements AutoCloseable {
    /** A node's client address. */
    public record Node(String host, int port) {
        public Node {
            Objects.requireNonNull(host, "host");
            if (port < 1 || port > 65535) {
                throw new IllegalArgumentException("a port is 1..65535, not " + port);
            }
        }

        /** {@code host:port} (an IPv6 address in brackets: {@code [::1]:6390}). */
        public static Node parse(String address) {
            int colon = address.lastIndexOf(':');
            if (colon <= 0) {
                throw new IllegalArgumentException("a node is host:port, not " + address);
            }
            String host = address.substring(0, colon);
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            }
            try {
                return new Node(host, Integer.parseInt(address.substring(colon + 1)));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("a node is host:port, not " + address, e);
            }
        }

        @Override
        public String toString() {
            return (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
        }
    }

    /** What every connection is made with. */
    static final class Settings {
        List<Node> nodes = new ArrayList<>();
        String user;
        String password;
        SSLContext ssl;
        boolean verifyHostname = true;
        int connectTimeoutMs = 2000;
        int commandTimeoutMs = 10_000;
        long watchdogTimeoutMs = 30_000;
        boolean events = true;
        int poolSize = 8;
    }

    /** Settings for {@link FlockdClient}. */
    public static final class Builder {
        private final Settings s = new Settings();

        private Builder() {}

        /** The nodes to use, as {@code host:port}, tried in this order (a single server: one). */
        public Builder nodes(String... addresses) {
            for (String address : addresses) {
                s.nodes.add(Node.parse(address));
            }
            return this;
        }

        public Builder nodes(Collection<Node> nodes) {
            s.nodes.addAll(nodes);
            return this;
        }

        /** {@code AUTH user password} on every connection ({@code user} null: {@code AUTH password}). */
        public Builder auth(String user, String password) {
            s.user = user;
            s.password = Objects.requireNonNull(password, "password");
            return this;
        }

        /** TLS with this context (see {@link FlockdClient#sslContextFromPem}). */
        public Builder tls(SSLContext context) {
            s.ssl = context;
            return this;
        }

        /** Whether the server's certificate must name the host as given (default true). */
        public Builder verifyHostname(boolean verify) {
            s.verifyHostname = verify;
            return this;
        }

        public Builder connectTimeout(Duration timeout) {
            s.connectTimeoutMs = positiveMs(timeout);
            return this;
        }

        /** The read timeout of commands that do not block (default 10 s). */
        public Builder commandTimeout(Duration timeout) {
            s.commandTimeoutMs = positiveMs(timeout);
            return this;
        }

        /**
         * The lease of a lock taken without a lease time; the watchdog renews it at a third of
         * it (default 30 s, as Redisson's {@code lockWatchdogTimeout}).
         */
        public Builder lockWatchdogTimeout(Duration lease) {
            s.watchdogTimeoutMs = positiveMs(lease);
            return this;
        }

        /**
         * Whether locks listen on {@code __flock__:<name>} for their holding's {@code expired}
         * and {@code forcereleased} (default true). Off: a loss is found by the next renewal
         * (within a third of the lease) or by the clock.
         */
        public Builder events(boolean on) {
            s.events = on;
            return this;
        }

        /** Idle connections kept for commands that do not block (default 8). */
        public Builder poolSize(int size) {
            s.poolSize = Math.max(1, size);
            return this;
        }

        public FlockdClient build() {
            if (s.nodes.isEmpty()) {
                throw new IllegalArgumentException("no node: give at least one host:port");
            }
            return new FlockdClient(s);
        }

        private static int positiveMs(Duration d) {
            long ms = d.toMillis();
            if (ms < 1 || ms > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("a duration of 1 ms to 24 days, not " + d);
            }
            return (int) ms;
        }
    }

    public static Builder builder() {
        return new Builder();
    }

    final Settings settings;
    /** Part of every OWNER id this client sends, so a lost reply can be recovered by FLOCK.STATUS. */
    final String clientId = UUID.randomUUID().toString();
    /** Timers: renewal due, deadline due. Its tasks never block; they hand work to {@link #workers}. */
    final ScheduledExecutorService timer;
    /** Renewals and releases, which may wait for the network. */
    final ExecutorService workers;
    final Events events;
    private final ArrayDeque<Connection> idle = new ArrayDeque<>();
    /** The node to try first: the last one that worked. */
    private final AtomicInteger preferred = new AtomicInteger();
    private volatile boolean closed;

    private FlockdClient(Settings settings) {
        this.settings = settings;
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, daemon("flockd-timer"));
        t.setRemoveOnCancelPolicy(true);
        this.timer = t;
        this.workers = Executors.newCachedThreadPool(daemon("flockd-worker"));
        this.events = settings.events ? new Events(this) : null;
    }

    private static ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    /** A fenced lock on {@code name}. Each call gives a new object; the server arbitrates between them. */
    public FlockdFencedLock getFencedLock(String name) {
        if (name == null || name.isEmpty()) {
            throw new IllegalArgumentException("a lock name is not empty");
        }
        return new FlockdFencedLock(this, name);
    }

    /**
     * Runs one command that does not block, on the first node that answers it, and returns
     * the reply. An error reply other than {@code -CLUSTERDOWN} is thrown as
     * {@link FlockdException.Reply}.
     *
     * <p>Only for commands that may be sent again (reads, renewals, releases, fenced writes):
     * after a connection error or {@code -CLUSTERDOWN} the command is sent to the next node.
     */
    public Object execute(Object... args) {
        return executeUntil(System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.commandTimeoutMs * 2L), args);
    }

    /** As {@link #execute(Object...)}, trying nodes until {@code deadlineNanos} (System.nanoTime). */
    Object executeUntil(long deadlineNanos, Object... args) {
        if (closed) {
            throw new FlockdException("the client is closed");
        }
        Exception last = null;
        int rounds = 0;
        // Each pass tries each node at most once; a pause between passes, bounded in number and time.
        for (int attempt = 0; attempt < settings.nodes.size() * 6; attempt++) {
            if (attempt > 0 && System.nanoTime() >= deadlineNanos) {
                break;
            }
            if (attempt > 0 && attempt % settings.nodes.size() == 0) {
                rounds++;
                sleepQuietly(Math.min(50L * rounds, 500));
            }
            Connection conn;
            try {
                conn = borrow();
            } catch (SSLException e) {
                // A certificate no node accepts does not get better by asking again.
                throw new FlockdException("TLS with every node failed (nodes " + settings.nodes + "): " + e, e);
            } catch (IOException e) {
                last = e;
                continue;
            }
            try {
                // Half of what is left, so a node that hangs leaves time to ask the next one.
                long leftMs = TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime());
                conn.readTimeout((int) Math.max(200, Math.min(settings.commandTimeoutMs, leftMs / 2)));
                Object reply = conn.call(args);
                giveBack(conn);
                return reply;
            } catch (FlockdException.Reply e) {
                if ("CLUSTERDOWN".equals(e.code())) {
                    last = e;
                    failed(conn);
                    continue;
                }
                giveBack(conn);
                throw e;
            } catch (IOException e) {
                last = e;
                failed(conn);
            }
        }
        throw new FlockdException("no node answered " + Resp.text(Resp.toBytes(args[0])) + " (nodes "
                + settings.nodes + "): " + last, last);
    }

    /** A connection of its own (not from the pool): for blocking commands and pub/sub. */
    Connection connect() throws IOException {
        return connectFrom(preferred.get());
    }

    private Connection borrow() throws IOException {
        synchronized (idle) {
            Connection conn = idle.pollFirst();
            if (conn != null) {
                return conn;
            }
        }
        return connectFrom(preferred.get());
    }

    /**
     * Connects to the first node that accepts, starting at {@code start}. Nodes that refuse or
     * cannot be reached are skipped: nothing was sent to them.
     */
    private Connection connectFrom(int start) throws IOException {
        IOException last = null;
        int n = settings.nodes.size();
        for (int i = 0; i < n; i++) {
            int index = Math.floorMod(start + i, n);
            try {
                Connection conn = Connection.open(settings, settings.nodes.get(index));
                preferred.set(index);
                return conn;
            } catch (ConnectException | NoRouteToHostException | SocketTimeoutException | SSLException e) {
                last = e;
            }
        }
        throw last != null ? last : new ConnectException("no node");
    }

    private void giveBack(Connection conn) {
        synchronized (idle) {
            if (!closed && idle.size() < settings.poolSize) {
                idle.addLast(conn);
                return;
            }
        }
        conn.close();
    }

    /** A connection that failed: close it, drop the idle ones to its node, and start at the next node. */
    void failed(Connection conn) {
        conn.close();
        int index = settings.nodes.indexOf(conn.node);
        preferred.compareAndSet(index, Math.floorMod(index + 1, settings.nodes.size()));
        synchronized (idle) {
            idle.removeIf(c -> {
                if (c.node.equals(conn.node)) {
                    c.close();
                    return true;
                }
                return false;
            });
        }
    }

    boolean isClosed() {
        return closed;
    }

    /** Stops renewing every lock of this client (their leases run out) and closes every connection. */
    @Override
    public void close() {
        closed = true;
        if (events != null) {
            events.close();
        }
        timer.shutdownNow();
        workers.shutdownNow();
        synchronized (idle) {
            idle.forEach(Connection::close);
            idle.clear();
        }
    }

    static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * A TLS context from PEM files as flockd's own: the CA that signed the server's certificate,
     * and for mutual TLS ({@code tls-auth-clients yes}) the client's certificate chain and its
     * PKCS#8 private key ({@code -----BEGIN PRIVATE KEY-----}, EC or RSA, what openssl makes);
     * {@code clientCert} and {@code clientKey} may be null.
     */
    public static SSLContext sslContextFromPem(Path caCert, Path clientCert, Path clientKey)
            throws IOException, GeneralSecurityException {
        CertificateFactory x509 = CertificateFactory.getInstance("X.509");
        KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
        trust.load(null, null);
        int i = 0;
        for (Certificate ca : x509.generateCertificates(new ByteArrayInputStream(Files.readAllBytes(caCert)))) {
            trust.setCertificateEntry("ca" + i++, ca);
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        KeyManagerFactory kmf = null;
        if (clientCert != null && clientKey != null) {
            Certificate[] chain = x509.generateCertificates(
                    new ByteArrayInputStream(Files.readAllBytes(clientCert))).toArray(new Certificate[0]);
            PrivateKey key = privateKey(clientKey);
            char[] none = new char[0];
            KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
            keys.load(null, null);
            keys.setKeyEntry("client", key, none, chain);
            kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(keys, none);
        }
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        return ctx;
    }

    private static PrivateKey privateKey(Path file) throws IOException, GeneralSecurityException {
        String pem = Files.readString(file, StandardCharsets.US_ASCII);
        String begin = "-----BEGIN PRIVATE KEY-----";
        int start = pem.indexOf(begin);
        int end = pem.indexOf("-----END PRIVATE KEY-----");
        if (start < 0 || end < start) {
            throw new GeneralSecurityException(file + ": not a PKCS#8 key (BEGIN PRIVATE KEY); convert it with "
                    + "openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8");
        }
        byte[] der = Base64.getMimeDecoder().decode(pem.substring(start + begin.length(), end));
        GeneralSecurityException last = null;
        for (String algorithm : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
                last = e;
            }
        }
        throw new GeneralSecurityException(file + ": not an EC, RSA or Ed25519 key", last);
    }
}
