package omni.trino;

import java.util.Map;

import io.trino.spi.eventlistener.EventListener;
import io.trino.spi.eventlistener.EventListenerFactory;

/**
 * {@code event-listener.name=omni-query-log} in {@code etc/event-listener.properties}; its
 * settings: {@code omni.events-file} (the query-log spool's events file, required),
 * {@code omni.catalogs} (comma-separated Trino catalogs that are omni catalogs; default
 * {@code omni}) and {@code omni.max-bytes} (the bound on unflushed events; default 64 MiB).
 */
public final class QueryLogListenerFactory implements EventListenerFactory {

    public static final String NAME = "omni-query-log";

    @Override
    public String getName() {
        return NAME;
    }

    @Override
    public EventListener create(Map<String, String> config, EventListenerContext context) {
        String events = config.get("omni.events-file");
        if (events == null || events.isBlank()) {
            throw new IllegalArgumentException("etc/event-listener.properties: omni.events-file is required for "
                    + NAME + " (omni_iceberg.trino_listener.write_listener_config writes it)");
        }
        long maxBytes = Long.parseLong(config.getOrDefault("omni.max-bytes", Long.toString(64L << 20)));
        return new QueryLogListener(events, config.getOrDefault("omni.catalogs", "omni"), maxBytes);
    }
}
