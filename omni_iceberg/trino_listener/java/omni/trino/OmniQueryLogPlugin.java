package omni.trino;

import java.util.List;

import io.trino.spi.Plugin;
import io.trino.spi.eventlistener.EventListenerFactory;

/** The plugin Trino finds in {@code plugin/omni-query-log/} (named in META-INF/services). */
public final class OmniQueryLogPlugin implements Plugin {

    @Override
    public Iterable<EventListenerFactory> getEventListenerFactories() {
        return List.of(new QueryLogListenerFactory());
    }
}
