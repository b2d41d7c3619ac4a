package omni.spark;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;

import scala.Option;

/**
 * Gives back the logical link a storage-partitioned join takes from the scans below it.
 *
 * <p>Spark 3.5's EnsureRequirements pushes a join's common partition values down to every
 * {@code BatchScanExec} under it - through a broadcast exchange too - by {@code scan.copy(..)},
 * which drops the node's tags, the logical link among them. When nothing else under that exchange
 * has a link, adaptive execution fails on {@code assert(link.isDefined)} as it makes the
 * exchange a query stage. The logical view makes that common: once {@link UniqueKeyAggregates}
 * removed a feature table's per-key aggregate, a small feature table is a bare scan under a
 * broadcast, and a self-join of the view (storage-partitioned on the id) failed with an
 * INTERNAL_ERROR - with or without view pruning.
 *
 * <p>Run among the query-stage preparation rules, after EnsureRequirements: a scan without a link
 * gets the one it had, the {@code DataSourceV2ScanRelation} holding the same {@link Scan} object
 * (the copy keeps it), found under the logical links of the plan's other nodes.
 */
public final class RestoreScanLinks extends Rule<SparkPlan> {

    @Override
    public SparkPlan apply(SparkPlan plan) {
        List<BatchScanExec> orphans = new ArrayList<>();
        List<LogicalPlan> links = new ArrayList<>();
        walk(plan, orphans, links);
        if (orphans.isEmpty()) {
            return plan;
        }
        Map<Scan, LogicalPlan> relations = new IdentityHashMap<>();
        Map<LogicalPlan, Boolean> seen = new IdentityHashMap<>();
        for (LogicalPlan link : links) {
            collect(link, relations, seen);
        }
        for (BatchScanExec scan : orphans) {
            LogicalPlan relation = relations.get(scan.scan());
            if (relation != null) {
                scan.setLogicalLink(relation);  // tags are per node: the copy, not the plan, changes
            }
        }
        return plan;
    }

    private static void walk(SparkPlan plan, List<BatchScanExec> orphans, List<LogicalPlan> links) {
        Option<LogicalPlan> link = plan.logicalLink();
        if (link.isDefined()) {
            links.add(link.get());
        } else if (plan instanceof BatchScanExec) {
            orphans.add((BatchScanExec) plan);
        }
        for (SparkPlan child : Plans.list(plan.children())) {
            walk(child, orphans, links);
        }
    }

    private static void collect(LogicalPlan plan, Map<Scan, LogicalPlan> relations, Map<LogicalPlan, Boolean> seen) {
        if (seen.put(plan, Boolean.TRUE) != null) {
            return;
        }
        if (plan instanceof DataSourceV2ScanRelation) {
            relations.putIfAbsent(((DataSourceV2ScanRelation) plan).scan(), plan);
        }
        for (LogicalPlan child : Plans.list(plan.children())) {
            collect(child, relations, seen);
        }
    }
}
