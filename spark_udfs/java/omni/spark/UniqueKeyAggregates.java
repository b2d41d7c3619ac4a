package omni.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.AnyValue;
import org.apache.spark.sql.catalyst.expressions.aggregate.First;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;


/**
 * Replaces {@code SELECT keys, any_value(c) AS c FROM t GROUP BY keys} by {@code SELECT keys, c AS c
 * FROM t} when table {@code t} declares those keys unique (table property {@value #UNIQUE_KEYS}).
 *
 * <p>The logical view reads each feature table grouped by the family's keys: that gives Spark the
 * distinct keys it needs to drop an unread LEFT JOIN (SPARK-39172). For a table the query does read,
 * the grouping is a hash aggregate and a shuffle that change nothing, since omni writes at most one
 * row per key and physical table. omni marks its tables with the property; a table without it, or
 * an aggregate of any other shape (other grouping, other functions, DISTINCT, FILTER), is left alone.
 * {@code first} and {@code any_value} of a group of one row are that row's value, nulls included.
 */
public final class UniqueKeyAggregates extends Rule<LogicalPlan> {

    /** Comma-separated column names that no two rows of the table share. */
    public static final String UNIQUE_KEYS = "omni.unique-keys";

    /** {@code false} leaves every aggregate in place (comparisons, debugging). */
    public static final String ENABLED = "spark.omni.uniqueKeyAggregates.enabled";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!Plans.enabled(ENABLED)) {
            return plan;
        }
        return Plans.bottomUp(plan, node -> node instanceof Aggregate ? withoutAggregate((Aggregate) node) : node);
    }

    private static LogicalPlan withoutAggregate(Aggregate agg) {
        Set<String> keys = uniqueKeys(agg.child());
        if (keys == null) {
            return agg;
        }
        Set<String> grouped = new HashSet<>();
        for (Expression e : Plans.list(agg.groupingExpressions())) {
            if (!(e instanceof AttributeReference)) {
                return agg;
            }
            grouped.add(((AttributeReference) e).name());
        }
        if (!grouped.equals(keys)) {
            return agg;
        }
        List<NamedExpression> projected = new ArrayList<>();
        for (NamedExpression e : Plans.list(agg.aggregateExpressions())) {
            if (e instanceof Attribute && grouped.contains(e.name())) {
                projected.add(e);
                continue;
            }
            Expression value = e instanceof Alias ? valueOfOneRow(((Alias) e).child()) : null;
            if (value == null) {
                return agg;
            }
            // the alias keeps its expression id: every reference above it stays valid
            projected.add((NamedExpression) ((Alias) e).withNewChildren(Plans.seq(Arrays.asList(value))));
        }
        return new Project(Plans.seq(projected), agg.child());
    }

    /** The argument of {@code first(x)} / {@code any_value(x)}; null for any other aggregate. */
    private static Expression valueOfOneRow(Expression e) {
        if (!(e instanceof AggregateExpression)) {
            return null;
        }
        AggregateExpression agg = (AggregateExpression) e;
        if (agg.isDistinct() || agg.filter().isDefined()) {
            return null;
        }
        AggregateFunction f = agg.aggregateFunction();
        if (f instanceof First) {
            return ((First) f).child();
        }
        if (f instanceof AnyValue) {
            return ((AnyValue) f).child();
        }
        return null;
    }

    /** The unique keys of the one table under filters and plain projections; null if none is declared. */
    private static Set<String> uniqueKeys(LogicalPlan plan) {
        LogicalPlan p = plan;
        while (true) {
            if (p instanceof DataSourceV2ScanRelation) {
                p = ((DataSourceV2ScanRelation) p).relation();
            }
            if (p instanceof DataSourceV2Relation) {
                String declared = ((DataSourceV2Relation) p).table().properties().get(UNIQUE_KEYS);
                return declared == null || declared.isEmpty() ? null : new HashSet<>(Arrays.asList(declared.split(",")));
            }
            if (p instanceof Filter) {
                p = ((Filter) p).child();
            } else if (p instanceof SubqueryAlias) {
                p = ((SubqueryAlias) p).child();
            } else if (p instanceof Project && onlyAttributes((Project) p)) {
                p = ((Project) p).child();
            } else {
                return null;
            }
        }
    }

    private static boolean onlyAttributes(Project project) {
        for (NamedExpression e : Plans.list(project.projectList())) {
            if (!(e instanceof Attribute)) {
                return false;
            }
        }
        return true;
    }
}
