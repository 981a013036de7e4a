package io.flockd;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A real flockd process for a test: on a loopback port, in a temporary directory, logging to a
 * file there, stopped by its pid (SIGTERM, then SIGKILL after 5 s) when closed.
 */
final class Flockd implements AutoCloseable {
    /** Every flockd started and not yet closed: killed by pid if the JVM is stopped (the suite's timeout). */
    private static final java.util.Set<Process> LIVE = java.util.concurrent.ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> LIVE.forEach(Process::destroyForcibly)));
    }

    final Process process;
    final int port;
    final Path dir;
    final Path log;

    private Flockd(Process process, int port, Path dir, Path log) {
        this.process = process;
        this.port = port;
        this.dir = dir;
        this.log = log;
    }

    static String binary() {
        String bin = System.getenv().getOrDefault("FLOCKD_BIN", "target/debug/flockd");
        if (!Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("no flockd binary at " + bin + ": build it, or set FLOCKD_BIN");
        }
        return bin;
    }

    /** A single node on a free port, with these extra flags; waits for its ready line. */
    static Flockd start(String... extra) throws Exception {
        int port = freePorts(1)[0];
        Path dir = Files.createTempDirectory("flockd-java-");
        Flockd f = spawn(port, dir, extra);
        try {
            f.awaitReady();
        } catch (Exception | Error e) {
            f.close(); // stopped by its pid even when it never became ready
            throw e;
        }
        return f;
    }

    /** Starts the process without waiting: the caller waits (a cluster's nodes wait for each other). */
    static Flockd spawn(int port, Path dir, String... extra) throws IOException {
        List<String> cmd = new ArrayList<>(List.of(binary(), "--bind", "127.0.0.1", "--port", Integer.toString(port),
                "--dir", dir.resolve("data").toString()));
        cmd.addAll(List.of(extra));
        Path log = dir.resolve("flockd.log");
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().put("FLOCKD_LOG_LEVEL", "info,openraft=error");
        Process process = pb.start();
        LIVE.add(process);
        return new Flockd(process, port, dir, log);
    }

    void awaitReady() throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("flockd exited at start: " + Files.readString(log));
            }
            if (Files.exists(log) && Files.readString(log).contains("ready to accept")) {
                return;
            }
            Thread.sleep(20);
        }
        throw new IllegalStateException("flockd was not ready in 20 s: " + Files.readString(log));
    }

    String address() {
        return "127.0.0.1:" + port;
    }

    /** SIGKILL to this pid, and wait for it to be gone. */
    void kill9() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(10, TimeUnit.SECONDS);
    }

    @Override
    public void close() throws Exception {
        if (process.isAlive()) {
            process.destroy();
            if (!process.waitFor(5, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
            }
        }
        LIVE.remove(process);
        deleteTree(dir);
    }

    static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    static int[] freePorts(int n) throws IOException {
        ServerSocket[] sockets = new ServerSocket[n];
        int[] ports = new int[n];
        try {
            for (int i = 0; i < n; i++) {
                sockets[i] = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress());
                ports[i] = sockets[i].getLocalPort();
            }
        } finally {
            for (ServerSocket s : sockets) {
                if (s != null) {
                    s.close();
                }
            }
        }
        return ports;
    }

    /** A 3-node cluster on loopback, as docs/cluster.md starts one. */
    static final class Cluster implements AutoCloseable {
        final List<Flockd> nodes = new ArrayList<>();
        final Path root;

        Cluster(int size) throws Exception {
            root = Files.createTempDirectory("flockd-java-cluster-");
            int[] ports = freePorts(2 * size);
            StringBuilder peers = new StringBuilder();
            for (int i = 0; i < size; i++) {
                if (i > 0) {
                    peers.append(',');
                }
                peers.append(i + 1).append("=127.0.0.1:").append(ports[i]).append('@').append(ports[size + i]);
            }
            try {
                for (int i = 0; i < size; i++) {
                    Path dir = Files.createDirectories(root.resolve("node" + (i + 1)));
                    nodes.add(spawn(ports[i], dir, "--node-id", Integer.toString(i + 1),
                            "--cluster-peers", peers.toString()));
                }
                for (Flockd node : nodes) {
                    node.awaitReady();
                }
            } catch (Exception e) {
                close();
                throw e;
            }
        }

        /** The index of the node that every live node names as leader (raft_leader_id). */
        int leader() throws Exception {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (System.nanoTime() < deadline) {
                java.util.Set<String> seen = new java.util.HashSet<>();
                for (Flockd node : nodes) {
                    if (!node.process.isAlive()) {
                        continue;
                    }
                    try (Raw raw = new Raw(node.port)) {
                        String info = Resp.text(raw.call("INFO", "replication"));
                        String id = info.lines().filter(l -> l.startsWith("raft_leader_id:"))
                                .map(l -> l.substring("raft_leader_id:".length()).trim()).findFirst().orElse("0");
                        seen.add(id);
                    } catch (IOException e) {
                        seen.add("?");
                    }
                }
                if (seen.size() == 1 && !seen.contains("0") && !seen.contains("?")) {
                    return Integer.parseInt(seen.iterator().next()) - 1;
                }
                Thread.sleep(50);
            }
            throw new AssertionError("the nodes agreed on no leader in 20 s");
        }

        @Override
        public void close() throws Exception {
            for (Flockd node : nodes) {
                node.close();
            }
            deleteTree(root);
        }
    }
}
