package omni.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.function.UnaryOperator;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.internal.SQLConf;

import scala.collection.JavaConverters;
import scala.collection.Seq;

/** What omni's rules share: Scala/Java collections, a bottom-up rewrite, their on/off switches. */
final class Plans {

    private Plans() {
    }

    /** Whether the session setting {@code key} is on (default on): every rule has one, to compare and debug. */
    static boolean enabled(String key) {
        return "true".equalsIgnoreCase(SQLConf.get().getConfString(key, "true"));
    }

    /**
     * {@code plan} with {@code node} applied to each node, children first. Plain recursion, no
     * Scala closures; a node whose children did not change is not copied.
     */
    static LogicalPlan bottomUp(LogicalPlan plan, UnaryOperator<LogicalPlan> node) {
        List<LogicalPlan> children = list(plan.children());
        List<LogicalPlan> rewritten = new ArrayList<>(children.size());
        boolean changed = false;
        for (LogicalPlan child : children) {
            LogicalPlan out = bottomUp(child, node);
            changed |= out != child;
            rewritten.add(out);
        }
        return node.apply(changed ? plan.withNewChildren(seq(rewritten)) : plan);
    }

    static <T> List<T> list(Seq<T> items) {
        return JavaConverters.seqAsJavaList(items);
    }

    /** An immutable Scala list, as plans expect. */
    static <T> Seq<T> seq(List<T> items) {
        return JavaConverters.asScalaBuffer(items).toList();
    }
}
