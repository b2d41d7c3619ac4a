package omni.trino;

import static omni.common.EventLines.json;
import static omni.common.EventLines.maskLiterals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

import io.trino.spi.eventlistener.ColumnInfo;
import io.trino.spi.eventlistener.EventListener;
import io.trino.spi.eventlistener.QueryCompletedEvent;
import io.trino.spi.eventlistener.QueryInputMetadata;
import io.trino.spi.eventlistener.TableInfo;
import omni.common.EventLines;

/**
 * Records the Trino queries on omni's catalogs in omni's query log ({@code omni_sys.query_log}).
 *
 * <p>Trino calls {@link #queryCompleted} once a query has finished, off the query's path. For
 * each table or view of an omni catalog the statement names itself (Trino's
 * {@code TableInfo.isDirectlyReferenced}: the logical view, not the physical tables in its
 * body), it appends one JSON line - the schema and name, the columns the query references
 * (Trino reports a view's own columns), the physical tables it scanned, the rows it returned,
 * its wall time, the time and its text with quoted literals masked - to the events file of
 * omni's query-log spool. omni turns those lines into rows when it flushes the log
 * (catalog_ext/log_spool.py, omni_iceberg/explore/query_log.py): a view's columns are logical
 * columns, a physical table's are mapped back through its family's state. A query that names
 * no omni table directly but scans some (through another catalog's view) is recorded per
 * physical table it scanned, with the columns it read from each.
 *
 * <p>Trino's events carry no predicate columns, so filter columns stay empty and batches unknown.
 *
 * <p>It never fails a query: errors are swallowed and counted (one warning in the server log),
 * and past {@code omni.max-bytes} of unflushed events lines are dropped and counted.
 */
public final class QueryLogListener implements EventListener {

    private static final Logger LOG = Logger.getLogger(QueryLogListener.class.getName());
    static final AtomicLong RECORDED = new AtomicLong();
    static final AtomicLong DROPPED = new AtomicLong();
    static final AtomicLong FAILED = new AtomicLong();
    private static final AtomicBoolean WARNED = new AtomicBoolean();

    private final Path events;
    private final Set<String> catalogs = new HashSet<>();
    private final long maxBytes;

    QueryLogListener(String events, String catalogs, long maxBytes) {
        this.events = Paths.get(events);
        for (String c : catalogs.split(",")) {
            if (!c.isBlank()) {
                this.catalogs.add(c.trim().toLowerCase(Locale.ROOT));
            }
        }
        this.maxBytes = maxBytes;
    }

    @Override
    public void queryCompleted(QueryCompletedEvent event) {
        try {
            record(event);
        } catch (Throwable e) {  // never the query's problem
            FAILED.incrementAndGet();
            if (WARNED.compareAndSet(false, true)) {
                LOG.log(Level.WARNING, "a Trino query was not recorded in omni's query log (" + e
                        + "); later failures are only counted");
            }
        }
    }

    private void record(QueryCompletedEvent event) throws Exception {
        if (event.getFailureInfo().isPresent()) {
            return;  // a failed query read nothing the layout should serve
        }
        List<String> scanned = new ArrayList<>();
        List<String[]> named = new ArrayList<>();  // schema, table
        List<List<String>> namedColumns = new ArrayList<>();
        for (QueryInputMetadata input : event.getIoMetadata().getInputs()) {
            if (catalogs.contains(input.getCatalogName().toLowerCase(Locale.ROOT))) {
                String t = input.getSchema() + "." + input.getTable();
                if (!scanned.contains(t)) {
                    scanned.add(t);
                }
            }
        }
        for (TableInfo t : event.getMetadata().getTables()) {
            if (t.isDirectlyReferenced() && catalogs.contains(t.getCatalog().toLowerCase(Locale.ROOT))) {
                List<String> columns = new ArrayList<>();
                for (ColumnInfo c : t.getColumns()) {
                    columns.add(c.getColumn());
                }
                named.add(new String[] {t.getSchema(), t.getTable()});
                namedColumns.add(columns);
            }
        }
        if (named.isEmpty()) {
            for (QueryInputMetadata input : event.getIoMetadata().getInputs()) {
                if (catalogs.contains(input.getCatalogName().toLowerCase(Locale.ROOT))) {
                    List<String> columns = new ArrayList<>();
                    for (QueryInputMetadata.Column c : input.getColumns()) {
                        columns.add(c.name());
                    }
                    named.add(new String[] {input.getSchema(), input.getTable()});
                    namedColumns.add(columns);
                }
            }
        }
        if (named.isEmpty()) {
            return;
        }
        String at = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSSxxx")
                .format(event.getEndTime().atOffset(ZoneOffset.UTC));
        String sql = maskLiterals(event.getMetadata().getQuery());
        long rows = event.getStatistics().getOutputRows();
        long latency = event.getEndTime().toEpochMilli() - event.getCreateTime().toEpochMilli();
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < named.size(); i++) {
            List<String> tables = new ArrayList<>();
            for (String s : scanned) {
                if (s.startsWith(named.get(i)[0] + ".")) {
                    tables.add(s);
                }
            }
            out.append('{')
                    .append("\"engine\":\"trino\",\"query_id\":").append(json(event.getMetadata().getQueryId()))
                    .append(",\"namespace\":").append(json(named.get(i)[0]))
                    .append(",\"table\":").append(json(named.get(i)[1]))
                    .append(",\"logical_version\":null")
                    .append(",\"columns\":").append(json(new ArrayList<>(new LinkedHashSet<>(namedColumns.get(i)))))
                    .append(",\"filter_columns\":[],\"batches\":null")
                    .append(",\"physical_tables\":").append(json(tables))
                    .append(",\"rows\":").append(rows)
                    .append(",\"latency_ms\":").append(latency)
                    .append(",\"sql\":").append(json(sql))
                    .append(",\"at\":").append(json(at))
                    .append("}\n");
        }
        append(out.toString().getBytes(StandardCharsets.UTF_8), named.size());
    }

    private void append(byte[] payload, int lines) throws Exception {
        (EventLines.append(events, maxBytes, payload) ? RECORDED : DROPPED).addAndGet(lines);
    }
}
