package omni.common;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;

/**
 * What omni's engine listeners (the Spark extension's and the Trino plugin's query-log
 * listeners) share: their events are JSON lines appended to the query-log spool's events
 * file, which omni flushes into {@code omni_sys.query_log}. Compiled into each of their jars.
 */
public final class EventLines {
    /** characters of a query's text kept in an event */
    public static final int MAX_SQL = 4000;

    private EventLines() {
    }

    /** {@code sql} with every quoted literal replaced by '***' and cut to its first characters: it may quote a secret. */
    public static String maskLiterals(String sql) {
        StringBuilder out = new StringBuilder(Math.min(sql.length(), MAX_SQL));
        boolean inQuote = false;
        for (int i = 0; i < sql.length() && out.length() < MAX_SQL; i++) {
            char c = sql.charAt(i);
            if (inQuote) {
                if (c == '\'' && i + 1 < sql.length() && sql.charAt(i + 1) == '\'') {
                    i++;  // an escaped quote inside the literal
                } else if (c == '\'') {
                    inQuote = false;
                    out.append("***'");
                }
            } else {
                out.append(c);
                inQuote = c == '\'';
            }
        }
        return out.toString();
    }

    public static String json(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    public static String json(List<String> items) {
        StringBuilder out = new StringBuilder("[");
        for (int i = 0; i < items.size(); i++) {
            out.append(i == 0 ? "" : ",").append(json(items.get(i)));
        }
        return out.append(']').toString();
    }

    /**
     * Appends {@code payload} (whole lines) to {@code events}; false, writing nothing, when the
     * file would pass {@code maxBytes} (the spool is bounded: unflushed events are dropped, not
     * grown without end).
     */
    public static boolean append(Path events, long maxBytes, byte[] payload) throws Exception {
        long size = Files.exists(events) ? Files.size(events) : 0L;
        if (size + payload.length > maxBytes) {
            return false;
        }
        if (!Files.isDirectory(events.getParent())) {
            Files.createDirectories(events.getParent());
        }
        // one write on an O_APPEND file: lines of concurrent writers (omni, other JVMs) never interleave
        Files.write(events, payload, StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
        return true;
    }
}
