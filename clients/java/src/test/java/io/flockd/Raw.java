package io.flockd;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;

/**
 * A bare connection for the tests' side of things (another client, MONITOR, a subscriber):
 * the codec under test, a plain socket, nothing of the client library.
 */
final class Raw implements AutoCloseable {
    final Socket socket;
    private final InputStream in;
    private final OutputStream out;

    Raw(int port) throws IOException {
        socket = new Socket("127.0.0.1", port);
        socket.setSoTimeout(10_000);
        in = new BufferedInputStream(socket.getInputStream());
        out = socket.getOutputStream();
    }

    void send(Object... args) throws IOException {
        Resp.writeCommand(out, args);
        out.flush();
    }

    /** One frame, an error reply as {@link Resp.Error}. */
    Object read() throws IOException {
        return Resp.read(in);
    }

    Object call(Object... args) throws IOException {
        send(args);
        return read();
    }

    void sendBytes(byte[] bytes) throws IOException {
        out.write(bytes);
        out.flush();
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
