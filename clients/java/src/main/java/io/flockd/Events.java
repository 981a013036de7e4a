package io.flockd;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * One subscriber connection per client, shared by its locks: it subscribes to
 * {@code __flock__:<name>} while a lock of that name is held here, and hands each message to
 * those locks. When the connection breaks (its node died) it connects to the next node and
 * subscribes again; meanwhile renewals and the clock still tell a loss.
 */
final class Events {
    private static final String PREFIX = "__flock__:";

    private final FlockdClient client;
    /**
     * Channel to the locks that listen on it, each with how many of its acquisitions do (two
     * threads may use one lock object: one holding, one waiting).
     */
    private final Map<String, Map<FlockdFencedLock, Integer>> listeners = new ConcurrentHashMap<>();
    /** Channel to the future its SUBSCRIBE confirmation completes. */
    private final Map<String, CompletableFuture<Void>> confirmations = new HashMap<>();
    private final Object lock = new Object();
    private Connection conn;
    private Thread reader;
    private volatile boolean closed;

    Events(FlockdClient client) {
        this.client = client;
    }

    /**
     * Listens for {@code lock}'s channel; returns once the server confirmed the subscription
     * (at most about a second: past that, renewals and the clock still tell).
     */
    void listen(FlockdFencedLock target) {
        String channel = PREFIX + target.getName();
        CompletableFuture<Void> confirmed;
        synchronized (lock) {
            if (closed) {
                return;
            }
            Map<FlockdFencedLock, Integer> set = listeners.computeIfAbsent(channel, c -> new ConcurrentHashMap<>());
            boolean first = set.isEmpty();
            set.merge(target, 1, Integer::sum);
            lock.notifyAll(); // an idle reader has something to listen for now
            if (!first) {
                return;
            }
            confirmed = new CompletableFuture<>();
            confirmations.put(channel, confirmed);
            ensureReader();
            if (conn != null) {
                try {
                    conn.send("SUBSCRIBE", channel);
                } catch (IOException e) {
                    conn.close(); // the reader reconnects and subscribes again
                }
            }
        }
        try {
            confirmed.get(1, TimeUnit.SECONDS);
        } catch (Exception ignored) {
            // Not confirmed in time: the renewals and the clock still tell a loss.
        }
    }

    void unlisten(FlockdFencedLock target) {
        String channel = PREFIX + target.getName();
        synchronized (lock) {
            Map<FlockdFencedLock, Integer> set = listeners.get(channel);
            if (set == null || set.computeIfPresent(target, (k, n) -> n > 1 ? n - 1 : null) != null || !set.isEmpty()) {
                return;
            }
            listeners.remove(channel);
            if (conn != null) {
                try {
                    conn.send("UNSUBSCRIBE", channel);
                } catch (IOException e) {
                    conn.close();
                }
            }
        }
    }

    private void ensureReader() {
        if (reader == null) {
            reader = new Thread(this::run, "flockd-events");
            reader.setDaemon(true);
            reader.start();
        }
    }

    private void run() {
        long backoff = 50;
        while (!closed) {
            synchronized (lock) {
                // No lock held here: no connection kept (a dead server is not dialled forever).
                while (!closed && listeners.isEmpty()) {
                    try {
                        lock.wait(1000);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }
            Connection c;
            try {
                c = client.connect();
                c.readTimeout(0);
            } catch (IOException | RuntimeException e) {
                FlockdClient.sleepQuietly(backoff);
                backoff = Math.min(backoff * 2, 1000);
                continue;
            }
            synchronized (lock) {
                if (closed) {
                    c.close();
                    return;
                }
                conn = c;
                try {
                    if (!listeners.isEmpty()) {
                        List<Object> args = new ArrayList<>();
                        args.add("SUBSCRIBE");
                        args.addAll(listeners.keySet());
                        c.send(args.toArray());
                    }
                } catch (IOException e) {
                    c.close();
                }
            }
            backoff = 50;
            try {
                while (!closed) {
                    dispatch(c.readFrame());
                }
            } catch (IOException | RuntimeException e) {
                // The node went away: connect to the next one.
            } finally {
                synchronized (lock) {
                    if (conn == c) {
                        conn = null;
                    }
                }
                client.failed(c);
            }
        }
    }

    private void dispatch(Object frame) {
        if (!(frame instanceof List<?> parts) || parts.size() < 3) {
            return;
        }
        String kind = Resp.text(parts.get(0));
        String channel = Resp.text(parts.get(1));
        if ("subscribe".equals(kind)) {
            synchronized (lock) {
                CompletableFuture<Void> f = confirmations.remove(channel);
                if (f != null) {
                    f.complete(null);
                }
            }
        } else if ("message".equals(kind)) {
            Map<FlockdFencedLock, Integer> set = listeners.get(channel);
            if (set != null) {
                String payload = Resp.text(parts.get(2));
                for (FlockdFencedLock target : set.keySet()) {
                    target.onEvent(payload);
                }
            }
        }
    }

    void close() {
        synchronized (lock) {
            closed = true;
            lock.notifyAll();
            if (conn != null) {
                conn.close();
            }
        }
    }
}
