package io.flockd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client's own RESP codec, against the real server's replies. */
class RespTest {
    static Flockd server;

    @BeforeAll
    static void start() throws Exception {
        server = Flockd.start();
    }

    @AfterAll
    static void stop() throws Exception {
        server.close();
    }

    @Test
    void simpleIntegerNullAndErrorReplies() throws Exception {
        try (Raw raw = new Raw(server.port)) {
            assertEquals("PONG", raw.call("PING"));
            assertEquals(1L, raw.call("FLOCK.ACQUIRE", "resp:a", 30000));
            assertNull(raw.call("FLOCK.ACQUIRE", "resp:a", 30000), "held: a null bulk string");
            assertNull(raw.call("FENCE.GET", "resp:nothing"));
            Object err = raw.call("FLOCK.RENEW", "resp:a", 99, 1000);
            assertInstanceOf(Resp.Error.class, err);
            assertEquals("NOTOWNER", ((Resp.Error) err).code());
            Object unknown = raw.call("NO.SUCH.COMMAND");
            assertEquals("ERR", ((Resp.Error) unknown).code());
            // The connection stays usable after error replies.
            assertEquals("PONG", raw.call("PING"));
        }
    }

    @Test
    void binaryBulkStringsRoundTrip() throws Exception {
        byte[] value = new byte[70_000];
        for (int i = 0; i < value.length; i++) {
            value[i] = (byte) i; // CR, LF and every byte value, across buffer boundaries
        }
        try (Raw raw = new Raw(server.port)) {
            assertArrayEquals(value, (byte[]) raw.call("ECHO", value));
            String utf8 = "ordre:été:锁";
            assertEquals(utf8, Resp.text(raw.call("ECHO", utf8)));
        }
    }

    @Test
    void statusAsAFlatArrayInResp2AndAMapInResp3() throws Exception {
        try (Raw raw = new Raw(server.port)) {
            raw.call("FLOCK.ACQUIRE", "resp:s", 30000, "OWNER", "me");
            List<?> flat = (List<?>) raw.call("FLOCK.STATUS", "resp:s");
            assertEquals("name", Resp.text(flat.get(0)));
            assertEquals("resp:s", Resp.text(flat.get(1)));
            assertEquals(1L, flat.get(3));
            assertInstanceOf(Map.class, raw.call("HELLO", 3));
            Map<?, ?> map = (Map<?, ?>) raw.call("FLOCK.STATUS", "resp:s");
            assertEquals("me", Resp.text(map.get("owner")));
            assertEquals(1L, map.get("holds"));
            assertNull(raw.call("FLOCK.ACQUIRE", "resp:s", 30000), "RESP3 null (_)");
        }
    }

    @Test
    void pipelinedRequestsAreAnsweredInOrder() throws Exception {
        try (Raw raw = new Raw(server.port)) {
            for (int i = 0; i < 100; i++) {
                raw.send("ECHO", "n" + i);
            }
            for (int i = 0; i < 100; i++) {
                assertEquals("n" + i, Resp.text(raw.read()));
            }
        }
    }

    @Test
    void declaredSizesAreBoundedAndNothingIsAllocatedForThem() {
        assertThrows(Resp.ProtocolException.class, () -> decode("$999999999999\r\n"));
        assertThrows(Resp.ProtocolException.class, () -> decode("*2000000000\r\n"));
        assertThrows(Resp.ProtocolException.class, () -> decode("*1\r\n".repeat(100) + ":1\r\n"));
        assertThrows(Resp.ProtocolException.class, () -> decode("?\r\n"));
        assertThrows(java.io.EOFException.class, () -> decode("$5\r\nab"));
        assertThrows(Resp.ProtocolException.class, () -> decode(":12x\r\n"));
    }

    @Test
    void resp3TypesDecode() throws Exception {
        assertEquals(true, decode("#t\r\n"));
        assertEquals("1.5", decode(",1.5\r\n"));
        assertEquals("hello", decode("=9\r\ntxt:hello\r\n"));
        assertEquals(List.of(1L, 2L), decode(">2\r\n:1\r\n:2\r\n"));
        assertTrue(decode("!3\r\nBAD\r\n") instanceof Resp.Error);
    }

    private static Object decode(String s) throws Exception {
        return Resp.read(new ByteArrayInputStream(s.getBytes(StandardCharsets.UTF_8)));
    }
}
