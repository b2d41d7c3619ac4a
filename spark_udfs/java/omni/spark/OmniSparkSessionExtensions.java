package omni.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.SparkPlan;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * omni's Spark session extension: {@code spark.sql.extensions=omni.spark.OmniSparkSessionExtensions}
 * (before Iceberg's). It adds four rules:
 * <ul>
 *   <li>{@link PruneOmniViews}, a resolution rule: a query reads an omni logical view with only
 *       the columns it names in the view's body, so analysis does not grow with the family. It
 *       must run before Iceberg resolves views in the same pass, hence omni's extension first;</li>
 *   <li>{@link UniqueKeyAggregates}, an optimizer rule, which removes the per-key aggregates the
 *       logical view wraps around each feature table once Spark has dropped the tables a query
 *       does not read;</li>
 *   <li>{@link DropContainedDriver}, an optimizer rule after it: a feature table read through an
 *       inner join (a NULL-rejecting filter) no longer joins the base table, whose rows hold its own;</li>
 *   <li>{@link RestoreScanLinks}, a query-stage preparation rule working around a Spark bug that
 *       made adaptive execution fail on a self-join of the view.</li>
 * </ul>
 *
 * <p>Why a pre-CBO rule: it must run after the operator-optimization batch, where Spark removes
 * unread outer joins because their right sides are grouped by the join keys (distinct keys). Run
 * earlier, removing the aggregate would also remove the proof those joins need.
 */
public final class OmniSparkSessionExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new PruneOmniViews(session);
            }
        });
        extensions.injectQueryStagePrepRule(new AbstractFunction1<SparkSession, Rule<SparkPlan>>() {
            @Override
            public Rule<SparkPlan> apply(SparkSession session) {
                return new RestoreScanLinks();
            }
        });
        extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new UniqueKeyAggregates();
            }
        });
        extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new DropContainedDriver();  // after UniqueKeyAggregates: it reads the tables bare
            }
        });
        return BoxedUnit.UNIT;
    }
}
