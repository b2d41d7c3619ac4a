package omni.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.LeftOuter$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.Option;

/**
 * Drops the view's driver (the base table) from an inner join with a feature table on the keys,
 * when the driver gives the query nothing but those keys.
 *
 * <p>The view's rows are the driver's rows; each feature table is LEFT JOINed to it. A filter that
 * rejects NULLs on a feature column makes Spark turn that join into an inner one - and then the
 * driver only says "this feature row's keys exist". omni's own planner reads the feature table
 * alone in that case (omni_iceberg/explore/rules/skip_base_table.py), because in one logical
 * version every feature row has its keys in the driver, and the driver's keys are unique. Spark
 * cannot know that, and joined the whole base table for nothing: the last gap between a Spark
 * query on the view and the same query on the tables it needs (benchmarks/view_pruning).
 *
 * <p>The proof that two tables come from one logical version is the mark {@link ViewPruning} puts
 * on every table a cut view reads: {@code <table>#omni-view(<token>,driver|member)}, the token a
 * digest of that version's body. Only a join whose two relations carry the same token is
 * rewritten - never a hand-written join of tables at snapshots of different versions. The rewrite,
 * {@code Inner(LeftOuter*(driver, T...), member side) ON driver.keys = member.keys}, becomes
 * {@code LeftOuter*(Project(member.keys AS driver.keys, member side), T...)}: each member row
 * matches exactly one driver row (unique keys, containment), so each yields the same row, with the
 * driver's key columns taken from the member's. {@code spark.omni.dropContainedDriver.enabled=false}
 * turns it off.
 */
public final class DropContainedDriver extends Rule<LogicalPlan> {

    public static final String ENABLED = "spark.omni.dropContainedDriver.enabled";
    private static final String ID = "_ai_unique_id_";
    private static final String BATCH = "_ai_append_name_";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return Plans.enabled(ENABLED) ? Plans.bottomUp(plan, DropContainedDriver::dropDriver) : plan;
    }

    /** The join without its driver, either side, or the join as it was. */
    private static LogicalPlan dropDriver(LogicalPlan node) {
        if (!(node instanceof Join) || ((Join) node).joinType() != Inner$.MODULE$) {
            return node;
        }
        Join join = (Join) node;
        LogicalPlan out = withoutDriver(join, join.left(), join.right());
        if (out == null) {
            out = withoutDriver(join, join.right(), join.left());
        }
        return out == null ? node : out;
    }

    /** The join without the driver at the bottom of {@code driverSide}, or null when that is not sound. */
    private static LogicalPlan withoutDriver(Join join, LogicalPlan driverSide, LogicalPlan memberSide) {
        if (join.condition().isEmpty()) {
            return null;
        }
        List<LogicalPlan> spine = new ArrayList<>();  // from driverSide down to the driver: projections, left joins
        LogicalPlan p = driverSide;
        while (true) {
            if (p instanceof Project) {
                spine.add(p);
                p = ((Project) p).child();
            } else if (p instanceof Join && ((Join) p).joinType() == LeftOuter$.MODULE$) {
                spine.add(p);
                p = ((Join) p).left();
            } else {
                break;
            }
        }
        LogicalPlan q = memberSide;  // filters and projections over one member table
        while (q instanceof Project || q instanceof Filter) {
            q = Plans.list(q.children()).get(0);
        }
        if (!(p instanceof DataSourceV2Relation) || !(q instanceof DataSourceV2Relation)) {
            return null;
        }
        DataSourceV2Relation driver = (DataSourceV2Relation) p;
        DataSourceV2Relation member = (DataSourceV2Relation) q;
        String[] driverMark = mark(driver);
        String[] memberMark = mark(member);
        if (driverMark == null || memberMark == null || !driverMark[1].equals("driver")
                || !memberMark[1].equals("member") || !driverMark[0].equals(memberMark[0])) {
            return null;
        }
        Attribute dId = column(driver, ID);
        Attribute dBatch = column(driver, BATCH);
        Attribute mId = column(member, ID);
        Attribute mBatch = column(member, BATCH);
        if (dId == null || dBatch == null || mId == null || mBatch == null) {
            return null;
        }
        List<Expression> conjuncts = new ArrayList<>();
        split(join.condition().get(), conjuncts);
        if (conjuncts.size() != 2 || !equates(conjuncts, dId, mId) || !equates(conjuncts, dBatch, mBatch)) {
            return null;
        }
        AttributeSet memberOut = memberSide.outputSet();
        if (!memberOut.contains(mId) || !memberOut.contains(mBatch)) {
            return null;
        }
        // the driver may give the query its keys only
        AttributeSet driverOut = driver.outputSet();
        Set<ExprId> keys = new HashSet<>();
        keys.add(dId.exprId());
        keys.add(dBatch.exprId());
        List<Attribute> used = new ArrayList<>(Plans.list(driverSide.output()));
        for (LogicalPlan node : spine) {
            used.addAll(Plans.list(node.references().toSeq()));
        }
        for (Attribute a : used) {
            if (driverOut.contains(a) && !keys.contains(a.exprId())) {
                return null;
            }
        }
        List<Attribute> carried = Plans.list(memberSide.output());
        List<NamedExpression> leaf = new ArrayList<>();
        leaf.add(sameAs(mId, dId));
        leaf.add(sameAs(mBatch, dBatch));
        leaf.addAll(carried);
        LogicalPlan rebuilt = new Project(Plans.seq(leaf), memberSide);
        for (int i = spine.size() - 1; i >= 0; i--) {
            LogicalPlan node = spine.get(i);
            if (node instanceof Project) {
                List<NamedExpression> projected = new ArrayList<>(Plans.list(((Project) node).projectList()));
                Set<ExprId> present = new HashSet<>();
                for (NamedExpression e : projected) {
                    present.add(e.exprId());
                }
                for (Attribute a : carried) {
                    if (present.add(a.exprId())) {
                        projected.add(a);  // the member side's columns pass up to the join's output
                    }
                }
                rebuilt = new Project(Plans.seq(projected), rebuilt);
            } else {
                Join left = (Join) node;
                rebuilt = left.copy(rebuilt, left.right(), left.joinType(), left.condition(), left.hint());
            }
        }
        List<NamedExpression> output = new ArrayList<>(Plans.list(join.output()));  // same columns, same order
        return new Project(Plans.seq(output), rebuilt);
    }

    /** (token, role) of a relation read through a cut view's marked name, else null. */
    private static String[] mark(DataSourceV2Relation relation) {
        Option<Identifier> ident = relation.identifier();
        if (ident.isEmpty()) {
            return null;
        }
        String name = ident.get().name();
        int at = name.indexOf(ViewPruning.TABLE_MARK);
        if (at < 0 || !name.endsWith(")")) {
            return null;
        }
        String[] parts = name.substring(at + ViewPruning.TABLE_MARK.length(), name.length() - 1).split(",");
        return parts.length == 2 ? parts : null;
    }

    private static Attribute column(DataSourceV2Relation relation, String name) {
        for (Attribute a : Plans.list(relation.output())) {
            if (a.name().toLowerCase(Locale.ROOT).equals(name)) {
                return a;
            }
        }
        return null;
    }

    private static void split(Expression e, List<Expression> out) {
        if (e instanceof And) {
            split(((And) e).left(), out);
            split(((And) e).right(), out);
        } else {
            out.add(e);
        }
    }

    /** Whether one conjunct is {@code a = b} (either way round), on these very attributes. */
    private static boolean equates(List<Expression> conjuncts, Attribute a, Attribute b) {
        for (Expression e : conjuncts) {
            if (e instanceof EqualTo) {
                Expression l = ((EqualTo) e).left();
                Expression r = ((EqualTo) e).right();
                if (same(l, a) && same(r, b) || same(l, b) && same(r, a)) {
                    return true;
                }
            }
        }
        return false;
    }

    private static boolean same(Expression e, Attribute a) {
        return e instanceof Attribute && ((Attribute) e).exprId().equals(a.exprId());
    }

    /** {@code value AS <target's name>}, keeping the target's expression id: references to it stay valid. */
    private static NamedExpression sameAs(Attribute value, Attribute target) {
        return new Alias(value, target.name(), target.exprId(), target.qualifier(), Option.empty(),
                         Plans.seq(new ArrayList<String>()));
    }
}
