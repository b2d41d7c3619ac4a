package omni.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * omni's Spark session extension: {@code spark.sql.extensions=omni.spark.OmniSparkSessionExtensions}
 * (beside Iceberg's). It adds one optimizer rule, {@link UniqueKeyAggregates}, which removes the
 * per-key aggregates the logical view wraps around each feature table once Spark has dropped the
 * tables a query does not read.
 *
 * <p>Why a pre-CBO rule: it must run after the operator-optimization batch, where Spark removes
 * unread outer joins because their right sides are grouped by the join keys (distinct keys). Run
 * earlier, removing the aggregate would also remove the proof those joins need.
 */
public final class OmniSparkSessionExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new UniqueKeyAggregates();
            }
        });
        return BoxedUnit.UNIT;
    }
}
