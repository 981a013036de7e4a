package io.flockd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;

/** The README's example, compiled and run as written against a real flockd, with the built jar. */
class ReadmeExampleTest {
    static String exampleSource() throws Exception {
        String readme = Files.readString(Path.of(System.getenv("FLOCKD_JAVA_README")));
        int start = readme.indexOf("```java\n");
        assertTrue(start >= 0, "the README has a java block");
        int end = readme.indexOf("```", start + 8);
        return readme.substring(start + 8, end);
    }

    @Test
    void theReadmeExampleRunsAsWritten() throws Exception {
        String jar = System.getenv("FLOCKD_JAVA_JAR");
        Path dir = Files.createTempDirectory("flockd-java-readme-");
        try (Flockd server = Flockd.start()) {
            Files.writeString(dir.resolve("Example.java"), exampleSource());
            JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
            assertEquals(0, javac.run(null, null, null, "-cp", jar, "-d", dir.toString(),
                    dir.resolve("Example.java").toString()), "the example compiles");

            String free = runWith(dir, jar, server.address());
            System.out.println("README example, free lock:\n" + free);
            assertEquals("token 1\nstored true\n", free);

            try (Raw holder = new Raw(server.port)) {
                assertTrue((Long) holder.call("FLOCK.ACQUIRE", "order:1042", 60_000) > 1);
                long start = System.nanoTime();
                String busy = runWith(dir, jar, server.address());
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                System.out.println("README example, lock held (" + ms + " ms):\n" + busy);
                assertEquals("busy\n", busy);
                assertTrue(ms >= 4500, "it waited the 5 s: " + ms + " ms");
            }
        } finally {
            Flockd.deleteTree(dir);
        }
    }

    static String runWith(Path dir, String jar, String node) throws Exception {
        ProcessBuilder pb = new ProcessBuilder("java", "-cp", jar + ":" + dir, "Example").redirectErrorStream(true);
        pb.environment().put("FLOCKD_NODE", node);
        Process p = pb.start();
        try {
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            assertEquals(0, p.exitValue(), out);
            return out;
        } finally {
            if (p.isAlive()) {
                p.destroyForcibly();
                p.waitFor(10, TimeUnit.SECONDS);
            }
        }
    }
}
