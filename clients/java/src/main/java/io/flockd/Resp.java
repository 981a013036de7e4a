package io.flockd;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The Redis protocol, as much as a lock client needs: requests are arrays of bulk strings;
 * replies are decoded into plain Java values.
 *
 * <p>Reply types: simple string ({@code +}) and verbatim string as {@link String}, integer as
 * {@link Long}, bulk string as {@code byte[]}, null ({@code $-1}, {@code *-1}, {@code _}) as
 * {@code null}, arrays, sets and pushes as {@link List}, maps as {@link Map}, errors as
 * {@link Error} (a top-level error is thrown by the connection, not returned). Lengths, counts
 * and nesting are bounded, and nothing is allocated for what a reply merely declares: bytes are
 * stored as they arrive.
 */
public final class Resp {
    /** Longest bulk string accepted in a reply. */
    static final int MAX_BULK = 64 << 20;
    /** Most elements accepted in one array or map. */
    static final int MAX_ELEMENTS = 1 << 20;
    /** Deepest nesting of arrays accepted. */
    static final int MAX_DEPTH = 32;
    /** Longest header line ({@code +...}, {@code -...}, {@code :...}, lengths). */
    static final int MAX_LINE = 64 << 10;

    private Resp() {}

    /** An error reply: {@code -CODE message}. */
    public record Error(String line) {
        /** The first word of the error ({@code NOTOWNER}, {@code CLUSTERDOWN}, {@code ERR}...). */
        public String code() {
            int space = line.indexOf(' ');
            return space < 0 ? line : line.substring(0, space);
        }
    }

    /** A reply the client cannot read: the connection must be closed. */
    public static final class ProtocolException extends IOException {
        private static final long serialVersionUID = 1L;

        ProtocolException(String message) {
            super(message);
        }
    }

    /** Writes one request: {@code *N} then each argument as a bulk string. */
    public static void writeCommand(OutputStream out, Object... args) throws IOException {
        ByteArrayOutputStream buf = new ByteArrayOutputStream(64);
        header(buf, '*', args.length);
        for (Object arg : args) {
            byte[] bytes = toBytes(arg);
            header(buf, '$', bytes.length);
            buf.write(bytes);
            buf.write('\r');
            buf.write('\n');
        }
        buf.writeTo(out);
    }

    static byte[] toBytes(Object arg) {
        if (arg instanceof byte[] bytes) {
            return bytes;
        }
        if (arg instanceof String s) {
            return s.getBytes(StandardCharsets.UTF_8);
        }
        if (arg instanceof Long || arg instanceof Integer || arg instanceof Short) {
            return arg.toString().getBytes(StandardCharsets.US_ASCII);
        }
        throw new IllegalArgumentException(
                "a command argument is a String, byte[] or integer, not "
                        + (arg == null ? "null" : arg.getClass().getName()));
    }

    private static void header(ByteArrayOutputStream buf, char type, long n) {
        buf.write(type);
        byte[] digits = Long.toString(n).getBytes(StandardCharsets.US_ASCII);
        buf.write(digits, 0, digits.length);
        buf.write('\r');
        buf.write('\n');
    }

    /** Reads one reply. An error reply is returned as an {@link Error}. */
    public static Object read(InputStream in) throws IOException {
        return read(in, 0);
    }

    private static Object read(InputStream in, int depth) throws IOException {
        if (depth > MAX_DEPTH) {
            throw new ProtocolException("reply nested deeper than " + MAX_DEPTH);
        }
        int type = in.read();
        if (type < 0) {
            throw new EOFException("the server closed the connection");
        }
        switch (type) {
            case '+':
                return line(in);
            case '-':
                return new Error(line(in));
            case ':':
                return integer(line(in));
            case '$':
            case '=': {
                long len = integer(line(in));
                if (len == -1) {
                    return null;
                }
                byte[] bytes = bulk(in, len);
                if (type == '=') {
                    // Verbatim: "txt:" then the text.
                    String s = new String(bytes, StandardCharsets.UTF_8);
                    return s.length() >= 4 ? s.substring(4) : s;
                }
                return bytes;
            }
            case '!':
                return new Error(new String(bulk(in, integer(line(in))), StandardCharsets.UTF_8));
            case '_':
                line(in);
                return null;
            case '#':
                return "t".equals(line(in));
            case ',':
            case '(':
                return line(in);
            case '*':
            case '~':
            case '>': {
                long n = integer(line(in));
                if (n == -1) {
                    return null;
                }
                checkCount(n);
                List<Object> items = new ArrayList<>((int) Math.min(n, 16));
                for (long i = 0; i < n; i++) {
                    items.add(read(in, depth + 1));
                }
                return items;
            }
            case '%': {
                long n = integer(line(in));
                checkCount(n);
                Map<Object, Object> map = new LinkedHashMap<>();
                for (long i = 0; i < n; i++) {
                    Object key = read(in, depth + 1);
                    map.put(key instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : key,
                            read(in, depth + 1));
                }
                return map;
            }
            case '|': {
                // Attributes describe the reply that follows: skip them.
                long n = integer(line(in));
                checkCount(n);
                for (long i = 0; i < 2 * n; i++) {
                    read(in, depth + 1);
                }
                return read(in, depth);
            }
            default:
                throw new ProtocolException("unknown reply type byte 0x" + Integer.toHexString(type));
        }
    }

    private static void checkCount(long n) throws ProtocolException {
        if (n < 0 || n > MAX_ELEMENTS) {
            throw new ProtocolException("reply declares " + n + " elements (at most " + MAX_ELEMENTS + ")");
        }
    }

    private static byte[] bulk(InputStream in, long len) throws IOException {
        if (len < 0 || len > MAX_BULK) {
            throw new ProtocolException("reply declares a bulk string of " + len + " bytes (at most " + MAX_BULK + ")");
        }
        ByteArrayOutputStream buf = new ByteArrayOutputStream((int) Math.min(len, 8192));
        byte[] chunk = new byte[(int) Math.min(len, 8192)];
        long left = len;
        while (left > 0) {
            int n = in.read(chunk, 0, (int) Math.min(left, chunk.length));
            if (n < 0) {
                throw new EOFException("the server closed the connection inside a bulk string");
            }
            buf.write(chunk, 0, n);
            left -= n;
        }
        if (in.read() != '\r' || in.read() != '\n') {
            throw new ProtocolException("a bulk string is not followed by CRLF");
        }
        return buf.toByteArray();
    }

    private static String line(InputStream in) throws IOException {
        ByteArrayOutputStream buf = new ByteArrayOutputStream(32);
        while (true) {
            int b = in.read();
            if (b < 0) {
                throw new EOFException("the server closed the connection inside a reply line");
            }
            if (b == '\r') {
                if (in.read() != '\n') {
                    throw new ProtocolException("CR not followed by LF in a reply line");
                }
                return buf.toString(StandardCharsets.UTF_8);
            }
            if (buf.size() >= MAX_LINE) {
                throw new ProtocolException("reply line longer than " + MAX_LINE + " bytes");
            }
            buf.write(b);
        }
    }

    private static long integer(String s) throws ProtocolException {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new ProtocolException("not an integer in a reply: " + s);
        }
    }

    /** A reply as text: bulk strings decoded as UTF-8, anything else through toString. */
    public static String text(Object reply) {
        if (reply instanceof byte[] b) {
            return new String(b, StandardCharsets.UTF_8);
        }
        return reply == null ? null : reply.toString();
    }
}
