package io.flockd;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.channels.SocketChannel;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * One connection to one flockd node: plain or TLS, authenticated on open. Not thread-safe: one
 * user at a time (the pool lends it out), except that {@link #close()} may come from anywhere.
 *
 * <p>The socket comes from a {@link SocketChannel}, so a thread blocked reading it (an acquire
 * with WAIT) can be interrupted: the interrupt closes the channel, and flockd drops the waiter.
 */
final class Connection implements Closeable {
    final FlockdClient.Node node;
    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;

    private Connection(FlockdClient.Node node, Socket socket) throws IOException {
        this.node = node;
        this.socket = socket;
        this.in = new BufferedInputStream(socket.getInputStream(), 8192);
        this.out = new BufferedOutputStream(socket.getOutputStream(), 8192);
    }

    /**
     * Connects, does the TLS handshake and AUTH. A refused connection throws
     * {@link java.net.ConnectException}: nothing was sent.
     */
    static Connection open(FlockdClient.Settings settings, FlockdClient.Node node) throws IOException {
        SocketChannel channel = SocketChannel.open();
        Socket raw = channel.socket();
        Connection conn = null;
        try {
            raw.setTcpNoDelay(true);
            raw.setKeepAlive(true);
            raw.connect(new InetSocketAddress(node.host(), node.port()), settings.connectTimeoutMs);
            raw.setSoTimeout(settings.connectTimeoutMs);
            Socket socket = raw;
            if (settings.ssl != null) {
                socket = tls(settings.ssl, settings.verifyHostname, raw, node);
            }
            conn = new Connection(node, socket);
            if (settings.password != null) {
                Object reply = settings.user == null
                        ? conn.call("AUTH", settings.password)
                        : conn.call("AUTH", settings.user, settings.password);
                if (!"OK".equals(reply)) {
                    throw new IOException("AUTH replied " + reply);
                }
            }
            conn.readTimeout(settings.commandTimeoutMs);
            return conn;
        } catch (IOException | RuntimeException e) {
            if (conn != null) {
                conn.close();
            } else {
                channel.close();
            }
            throw e;
        }
    }

    private static Socket tls(SSLContext ssl, boolean verifyHostname, Socket raw, FlockdClient.Node node)
            throws IOException {
        SSLSocket socket = (SSLSocket) ssl.getSocketFactory().createSocket(raw, node.host(), node.port(), true);
        socket.setUseClientMode(true);
        if (verifyHostname) {
            SSLParameters params = socket.getSSLParameters();
            // Checks the certificate's DNS or IP SAN against the host as it was given.
            params.setEndpointIdentificationAlgorithm("HTTPS");
            socket.setSSLParameters(params);
        }
        socket.startHandshake();
        return socket;
    }

    void readTimeout(int ms) throws IOException {
        socket.setSoTimeout(ms);
    }

    /** Sends one request and reads its reply; an error reply is thrown as {@link FlockdException.Reply}. */
    Object call(Object... args) throws IOException {
        send(args);
        return reply();
    }

    void send(Object... args) throws IOException {
        Resp.writeCommand(out, args);
        out.flush();
    }

    Object reply() throws IOException {
        Object reply = Resp.read(in);
        if (reply instanceof Resp.Error error) {
            throw new FlockdException.Reply(error);
        }
        return reply;
    }

    /** Reads one frame as it is, errors included (pub/sub, MONITOR). */
    Object readFrame() throws IOException {
        return Resp.read(in);
    }

    boolean isClosed() {
        return socket.isClosed();
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // Closing is best effort: the server drops the connection's state either way.
        }
    }
}
