package omni.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.Star;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.analysis.UnresolvedHaving;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.NaturalJoin;
import org.apache.spark.sql.catalyst.plans.UsingJoin;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Generate;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LateralJoin;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Offset;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Repartition;
import org.apache.spark.sql.catalyst.plans.logical.RepartitionByExpression;
import org.apache.spark.sql.catalyst.plans.logical.ResolvedHint;
import org.apache.spark.sql.catalyst.plans.logical.Sample;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias$;
import org.apache.spark.sql.catalyst.plans.logical.UnresolvedHint;
import org.apache.spark.sql.catalyst.plans.logical.Window;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.View;


/**
 * A resolution rule: a query that names some columns of an omni logical view reads that view
 * with only those columns (and the joins they need) in its body, so Spark's analysis costs what
 * the query reads, not the family's width. See {@link ViewPruning} for the cut itself.
 *
 * <p>It must run before Iceberg's view resolution in the same pass: omni's extension is listed
 * first in {@code spark.sql.extensions} (spark_udfs/extension.py). It swaps the relation's name
 * for a marked one that {@link OmniSparkCatalog#loadView} answers with the pruned view.
 *
 * <p>When pruning is sound, and only then:
 * <ul>
 *   <li>every column the query can read is named: no star ({@code *}, {@code t.*}, regex
 *       columns, MERGE's {@code UPDATE SET *}), no NATURAL or USING join, no PIVOT / UNPIVOT
 *       (they read every other column). Names are collected from the whole statement, subqueries
 *       included; a name used for something else only keeps one more column;</li>
 *   <li>between the relation and the statement's result there is a projection or an aggregate
 *       (which name their outputs), and only operators that pass columns through (filters, joins,
 *       sorts, limits, aliases...). A set operation, DISTINCT, INSERT ... TABLE v and a bare
 *       {@code spark.table(v)} see every column, so the view is left whole.</li>
 * </ul>
 * {@code spark.omni.viewPruning.enabled=false} turns it off.
 */
public final class PruneOmniViews extends Rule<LogicalPlan> {

    public static final String ENABLED = "spark.omni.viewPruning.enabled";

    private final SparkSession session;

    public PruneOmniViews(SparkSession session) {
        this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!hasRelation(plan) || !Plans.enabled(ENABLED)) {
            return plan;
        }
        Set<String> names = new HashSet<>();
        if (!collect(plan, names)) {
            return plan;
        }
        return rewrite(plan, false, names);
    }

    private static boolean hasRelation(LogicalPlan plan) {
        if (plan instanceof UnresolvedRelation) {
            return true;
        }
        for (LogicalPlan child : Plans.list(plan.children())) {
            if (hasRelation(child)) {
                return true;
            }
        }
        return false;
    }

    /** Adds every column name the plan may read to {@code names}; false when it may read unnamed ones. */
    private static boolean collect(LogicalPlan plan, Set<String> names) {
        String kind = plan.getClass().getSimpleName();
        if (kind.equals("Pivot") || kind.equals("Unpivot")) {
            return false;
        }
        if (plan instanceof Join) {
            Object type = ((Join) plan).joinType();
            if (type instanceof UsingJoin || type instanceof NaturalJoin) {
                return false;
            }
        }
        for (Expression e : Plans.list(plan.expressions())) {
            if (!collect(e, names)) {
                return false;
            }
        }
        for (LogicalPlan child : Plans.list(plan.children())) {
            if (!collect(child, names)) {
                return false;
            }
        }
        return true;
    }

    private static boolean collect(Expression e, Set<String> names) {
        if (e instanceof Star || e.getClass().getSimpleName().contains("Star")) {
            return false;  // UnresolvedStar, UnresolvedRegex, MERGE's star actions
        }
        if (e instanceof UnresolvedAttribute) {
            for (String part : Plans.list(((UnresolvedAttribute) e).nameParts())) {
                names.add(part.toLowerCase(Locale.ROOT));
            }
        } else if (e instanceof Attribute) {
            names.add(((Attribute) e).name().toLowerCase(Locale.ROOT));
        }
        if (e instanceof SubqueryExpression && !collect(((SubqueryExpression) e).plan(), names)) {
            return false;
        }
        for (Expression child : Plans.list(e.children())) {
            if (!collect(child, names)) {
                return false;
            }
        }
        return true;
    }

    /** Operators whose output is their input's columns (plus their own): a cut above them still holds. */
    private static boolean passesColumns(LogicalPlan plan) {
        return plan instanceof Filter || plan instanceof Sort || plan instanceof GlobalLimit
                || plan instanceof LocalLimit || plan instanceof Offset || plan instanceof SubqueryAlias
                || plan instanceof Join || plan instanceof LateralJoin || plan instanceof Sample
                || plan instanceof UnresolvedHint || plan instanceof ResolvedHint || plan instanceof Repartition
                || plan instanceof RepartitionByExpression || plan instanceof Window || plan instanceof Generate
                || plan instanceof UnresolvedHaving;
    }

    /** {@code named}: a projection or an aggregate lies between this node and the result. */
    private LogicalPlan rewrite(LogicalPlan plan, boolean named, Set<String> names) {
        if (plan instanceof UnresolvedRelation) {
            return named ? prune((UnresolvedRelation) plan, names) : plan;
        }
        boolean below = plan instanceof Project || plan instanceof Aggregate || (named && passesColumns(plan));
        List<LogicalPlan> children = Plans.list(plan.children());
        List<LogicalPlan> out = new ArrayList<>(children.size());
        boolean changed = false;
        for (LogicalPlan child : children) {
            LogicalPlan c = rewrite(child, below, names);
            changed |= c != child;
            out.add(c);
        }
        return changed ? plan.withNewChildren(Plans.seq(out)) : plan;
    }

    private LogicalPlan prune(UnresolvedRelation relation, Set<String> names) {
        List<String> parts = Plans.list(relation.multipartIdentifier());
        if (parts.size() == 1 && session.sessionState().catalog().isTempView(relation.multipartIdentifier())) {
            return relation;
        }
        CatalogPath where = CatalogPath.of(parts, session.sessionState().catalogManager());
        OmniSparkCatalog omni = where.omniCatalog();
        if (omni == null) {
            return relation;
        }
        Identifier ident = where.identifier();
        View view = omni.omniView(ident);
        View pruned = view == null ? null : ViewPruning.pruned(view, names);
        if (pruned == null) {
            return relation;
        }
        String marked = omni.stagePruned(ident, pruned);
        List<String> markedParts = new ArrayList<>(parts.subList(0, parts.size() - 1));
        markedParts.add(marked);
        // the alias keeps the view's own name, so `wide.col` and `ns.wide.col` resolve as before
        List<String> alias = new ArrayList<>();
        alias.add(where.catalog().name());
        alias.addAll(where.path());
        return SubqueryAlias$.MODULE$.apply(Plans.seq(alias), new UnresolvedRelation(Plans.seq(markedParts), relation.options(),
                                                                       relation.isStreaming()));
    }
}
