package omni.spark;

import static omni.common.EventLines.json;
import static omni.common.EventLines.maskLiterals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.util.QueryExecutionListener;

import scala.Option;
import omni.common.EventLines;

/**
 * Records the Spark SQL queries on omni's logical views in omni's query log
 * ({@code omni_sys.query_log}), so co-read groups, column splits and hot columns learn from them.
 *
 * <p>Spark calls it after each successful action, on its listener bus thread: a query never
 * waits for it. For each omni view the analysed plan reads, it appends one JSON line - the
 * logical table and version (from the view's properties), the view columns the rest of the plan
 * references (all of them for {@code SELECT *}), those a filter references, the batches an
 * equality or IN filter on {@code _ai_append_name_} names, the physical tables the optimised plan
 * scans, the result's rows (-1 when the plan does not say), the time and the statement's text
 * with its quoted literals masked - to the events file of omni's query-log spool
 * ({@code spark.omni.queryLog.events}, set by spark_udfs/extension.py). omni turns the lines into
 * rows when it flushes the log (catalog_ext/log_spool.py), redacting the text again.
 *
 * <p>It never fails or slows the query: every error is swallowed and counted ({@link #failed()},
 * one warning on stderr), and past {@code spark.omni.queryLog.maxBytes} of unflushed events a
 * line is dropped and counted ({@link #dropped()}) instead of growing the file without bound.
 */
public final class QueryLogListener implements QueryExecutionListener {

    public static final String EVENTS = "spark.omni.queryLog.events";
    public static final String MAX_BYTES = "spark.omni.queryLog.maxBytes";
    private static final String BATCH_COLUMN = "_ai_append_name_";

    private static final AtomicLong RECORDED = new AtomicLong();
    private static final AtomicLong DROPPED = new AtomicLong();
    private static final AtomicLong FAILED = new AtomicLong();
    private static final AtomicBoolean WARNED = new AtomicBoolean();

    private final Path events;
    private final long maxBytes;

    public QueryLogListener(SparkConf conf) {
        String path = conf.get(EVENTS, "");
        this.events = path.isEmpty() ? null : Paths.get(path);
        this.maxBytes = conf.getLong(MAX_BYTES, 64L << 20);
    }

    /** Lines written since the JVM started. */
    public static long recorded() {
        return RECORDED.get();
    }

    /** Lines left out because the unflushed events passed the bound. */
    public static long dropped() {
        return DROPPED.get();
    }

    /** Queries whose recording failed (an unwritable spool, an unexpected plan). */
    public static long failed() {
        return FAILED.get();
    }

    @Override
    public void onSuccess(String funcName, QueryExecution qe, long durationNs) {
        if (events == null) {
            return;
        }
        try {
            record(qe, durationNs);
        } catch (Throwable e) {  // never the query's problem
            FAILED.incrementAndGet();
            if (WARNED.compareAndSet(false, true)) {
                System.err.println("omni: a Spark query was not recorded in omni's query log (" + e
                        + "); later failures are only counted");
            }
        }
    }

    @Override
    public void onFailure(String funcName, QueryExecution qe, Exception exception) {
        // a failed query read nothing the layout should serve
    }

    /** One omni view in the analysed plan: its logical table, version and output. */
    private static final class ViewRead {
        final String namespace;
        final String table;
        final long version;
        final List<Attribute> output;

        ViewRead(String namespace, String table, long version, List<Attribute> output) {
            this.namespace = namespace;
            this.table = table;
            this.version = version;
            this.output = output;
        }
    }

    private void record(QueryExecution qe, long durationNs) throws Exception {
        SparkSession session = qe.sparkSession();
        List<ViewRead> views = new ArrayList<>();
        Set<Object> referenced = new HashSet<>();
        Set<Object> filtered = new HashSet<>();
        Map<Object, Set<String>> batches = new LinkedHashMap<>();
        Set<Object> unknownBatches = new HashSet<>();
        walk(qe.analyzed(), session, views, referenced, filtered, batches, unknownBatches);
        if (views.isEmpty()) {
            return;
        }
        List<String> scanned = scannedTables(qe.optimizedPlan());
        long rows = outputRows(qe);
        String at = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSSxxx")
                .format(Instant.now().atOffset(ZoneOffset.UTC));
        String sql = maskLiterals(sqlText(qe));
        String queryId = UUID.randomUUID().toString().replace("-", "").substring(0, 16);
        StringBuilder out = new StringBuilder();
        for (ViewRead v : views) {
            List<String> columns = new ArrayList<>();
            List<String> filters = new ArrayList<>();
            Set<String> named = null;
            for (Attribute a : v.output) {
                Object id = a.exprId();
                if (referenced.contains(id) && !columns.contains(a.name())) {
                    columns.add(a.name());
                }
                if (filtered.contains(id) && !filters.contains(a.name())) {
                    filters.add(a.name());
                }
                if (a.name().equalsIgnoreCase(BATCH_COLUMN) && batches.containsKey(id) && !unknownBatches.contains(id)) {
                    named = batches.get(id);
                }
            }
            List<String> tables = new ArrayList<>();
            for (String t : scanned) {
                if (t.startsWith(v.namespace + ".")) {
                    tables.add(t);
                }
            }
            out.append('{')
                    .append("\"engine\":\"spark\",\"query_id\":").append(json(queryId))
                    .append(",\"namespace\":").append(json(v.namespace))
                    .append(",\"table\":").append(json(v.table))
                    .append(",\"logical_version\":").append(v.version < 0 ? "null" : Long.toString(v.version))
                    .append(",\"columns\":").append(json(columns))
                    .append(",\"filter_columns\":").append(json(filters))
                    .append(",\"batches\":").append(named == null ? "null" : json(new ArrayList<>(named)))
                    .append(",\"physical_tables\":").append(json(tables))
                    .append(",\"rows\":").append(rows)
                    .append(",\"latency_ms\":").append(durationNs / 1_000_000L)
                    .append(",\"sql\":").append(json(sql))
                    .append(",\"at\":").append(json(at))
                    .append("}\n");
        }
        append(out.toString().getBytes(StandardCharsets.UTF_8), views.size());
    }

    private void append(byte[] payload, int lines) throws Exception {
        (EventLines.append(events, maxBytes, payload) ? RECORDED : DROPPED).addAndGet(lines);
    }

    /**
     * Finds the omni views of {@code plan} (not descending into them: their bodies are theirs)
     * and collects what the rest of the plan references, filters on, and which batches it names.
     */
    private static void walk(LogicalPlan plan, SparkSession session, List<ViewRead> views, Set<Object> referenced,
                             Set<Object> filtered, Map<Object, Set<String>> batches, Set<Object> unknownBatches) {
        if (plan instanceof SubqueryAlias) {
            ViewRead view = omniView((SubqueryAlias) plan, session);
            if (view != null) {
                views.add(view);
                return;
            }
        }
        for (Expression e : Plans.list(plan.expressions())) {
            references(e, referenced, session, views, filtered, batches, unknownBatches);
            if (plan instanceof Filter) {
                attributes(e, filtered);
                conjuncts(e, batches, unknownBatches);
            }
        }
        for (LogicalPlan child : Plans.list(plan.children())) {
            walk(child, session, views, referenced, filtered, batches, unknownBatches);
        }
    }

    private static void references(Expression e, Set<Object> into, SparkSession session, List<ViewRead> views,
                                   Set<Object> filtered, Map<Object, Set<String>> batches, Set<Object> unknownBatches) {
        if (e instanceof AttributeReference) {
            into.add(((AttributeReference) e).exprId());
        }
        if (e instanceof SubqueryExpression) {
            // a subquery may read a view itself, and reads outer columns
            walk(((SubqueryExpression) e).plan(), session, views, into, filtered, batches, unknownBatches);
        }
        for (Expression child : Plans.list(e.children())) {
            references(child, into, session, views, filtered, batches, unknownBatches);
        }
    }

    private static void attributes(Expression e, Set<Object> into) {
        if (e instanceof AttributeReference) {
            into.add(((AttributeReference) e).exprId());
        }
        for (Expression child : Plans.list(e.children())) {
            attributes(child, into);
        }
    }

    /** Batch names a filter's conjuncts pin ({@code b = 'x'}, {@code b IN ('x', 'y')}); other uses make them unknown. */
    private static void conjuncts(Expression e, Map<Object, Set<String>> batches, Set<Object> unknownBatches) {
        if (e instanceof And) {
            conjuncts(((And) e).left(), batches, unknownBatches);
            conjuncts(((And) e).right(), batches, unknownBatches);
            return;
        }
        Attribute attr = null;
        List<Object> values = new ArrayList<>();
        if (e instanceof EqualTo) {
            Expression l = strip(((EqualTo) e).left());
            Expression r = strip(((EqualTo) e).right());
            if (l instanceof AttributeReference && r instanceof Literal) {
                attr = (Attribute) l;
                values.add(((Literal) r).value());
            } else if (r instanceof AttributeReference && l instanceof Literal) {
                attr = (Attribute) r;
                values.add(((Literal) l).value());
            }
        } else if (e instanceof In && strip(((In) e).value()) instanceof AttributeReference) {
            attr = (Attribute) strip(((In) e).value());
            for (Expression item : Plans.list(((In) e).list())) {
                if (!(strip(item) instanceof Literal)) {
                    unknownBatches.add(attr.exprId());
                    return;
                }
                values.add(((Literal) strip(item)).value());
            }
        }
        if (attr == null || !attr.name().equalsIgnoreCase(BATCH_COLUMN)) {
            return;
        }
        Set<String> names = new LinkedHashSet<>();
        for (Object v : values) {
            if (v != null) {
                names.add(v.toString());
            }
        }
        Set<String> before = batches.get(attr.exprId());
        if (before != null) {
            names.retainAll(before);  // two conjuncts on the batch: both hold
        }
        batches.put(attr.exprId(), names);
    }

    /** {@code e} without the casts the analyser wraps around a compared column or literal. */
    private static Expression strip(Expression e) {
        while (e.getClass().getSimpleName().endsWith("Cast") && e.children().size() == 1) {
            e = Plans.list(e.children()).get(0);
        }
        return e;
    }

    /** The logical table read by {@code alias}, when it names an omni view of an omni catalog, else null. */
    private static ViewRead omniView(SubqueryAlias alias, SparkSession session) {
        List<String> parts = new ArrayList<>(Plans.list(alias.identifier().qualifier()));
        String name = alias.identifier().name();
        int mark = name.indexOf(OmniSparkCatalog.PRUNED_MARK);
        parts.add(mark < 0 ? name : name.substring(0, mark));
        CatalogPath where = CatalogPath.of(parts, session.sessionState().catalogManager());
        OmniSparkCatalog omni = where.omniCatalog();
        if (omni == null) {
            return null;
        }
        List<String> path = where.path();
        Map<String, String> props = omni.omniViewProperties(where.identifier());
        if (props == null) {
            return null;
        }
        String logical = props.getOrDefault("omni.pinned-of", String.join(".", path));
        String version = props.getOrDefault("omni.pinned-version", props.getOrDefault("omni.logical-version", ""));
        int dot = logical.lastIndexOf('.');
        return new ViewRead(logical.substring(0, dot), logical.substring(dot + 1),
                version.isEmpty() ? -1 : Long.parseLong(version), Plans.list(alias.output()));
    }

    /** {@code ns.table} of each table the optimised plan scans (omni's marks removed). */
    private static List<String> scannedTables(LogicalPlan plan) {
        Set<String> out = new LinkedHashSet<>();
        scanned(plan, out);
        return new ArrayList<>(out);
    }

    private static void scanned(LogicalPlan plan, Set<String> out) {
        DataSourceV2Relation relation = null;
        if (plan instanceof DataSourceV2ScanRelation) {
            relation = ((DataSourceV2ScanRelation) plan).relation();
        } else if (plan instanceof DataSourceV2Relation) {
            relation = (DataSourceV2Relation) plan;
        }
        if (relation != null) {
            Option<Identifier> ident = relation.identifier();
            if (ident.isDefined()) {
                Identifier id = OmniSparkCatalog.unmarked(ident.get());
                out.add(String.join(".", id.namespace()) + "." + id.name());
            }
        }
        for (LogicalPlan child : Plans.list(plan.children())) {
            scanned(child, out);
        }
    }

    /** The rows the query returned, when the top of its executed plan counts them; else -1. */
    private static long outputRows(QueryExecution qe) {
        SparkPlan plan = qe.executedPlan();
        for (int depth = 0; depth < 16 && plan != null; depth++) {
            if (plan instanceof AdaptiveSparkPlanExec) {
                plan = ((AdaptiveSparkPlanExec) plan).executedPlan();
                continue;
            }
            SQLMetric rows = scala.collection.JavaConverters.mapAsJavaMap(plan.metrics()).get("numOutputRows");
            if (rows != null) {
                return rows.value();
            }
            String kind = plan.getClass().getSimpleName();
            boolean passes = kind.equals("WholeStageCodegenExec") || kind.equals("InputAdapter")
                    || kind.equals("ProjectExec") || kind.equals("ColumnarToRowExec") || kind.endsWith("QueryStageExec");
            if (!passes || plan.children().size() != 1) {
                return -1;
            }
            plan = Plans.list(plan.children()).get(0);
        }
        return -1;
    }

    private static String sqlText(QueryExecution qe) {
        try {
            Option<String> text = qe.logical().origin().sqlText();
            return text.isDefined() ? text.get() : "";
        } catch (RuntimeException e) {
            return "";
        }
    }
}
