package omni.spark;

import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.iceberg.spark.SparkCatalog;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NoSuchViewException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.View;

/**
 * Iceberg's {@link SparkCatalog}, keeping the tables it loads at a snapshot id.
 *
 * <p>The logical view names every physical table of the family {@code VERSION AS OF} the
 * snapshot its logical version pinned, and Spark resolves each one - a catalog query and a
 * metadata file read - on every query, even the tables the optimizer then drops: at 100
 * tables that was most of a query. A table read at a snapshot id cannot change (snapshots are
 * immutable, files are only deleted once the snapshot is expired), so the loaded table is
 * kept, per catalog, for the life of the session; its table properties are those of that load
 * until {@code REFRESH TABLE} (which drops the table's entries). Nothing else is cached: unversioned reads,
 * writes, branches and tags (which move) load as before, so omni's Python writers are seen at
 * once ({@code cache-enabled=false} stays).
 *
 * <p>It also answers the marked view names {@link PruneOmniViews} puts in a query: an omni logical
 * view cut down to the columns that query names ({@link ViewPruning}).
 */
public class OmniSparkCatalog extends SparkCatalog {

    private static final int MAX_TABLES = 4096;

    private final Map<String, Table> atSnapshot = new LinkedHashMap<String, Table>(256, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Table> eldest) {
            return size() > MAX_TABLES;
        }
    };

    /** Marks a pruned view's name: {@code <view>#omni-columns(<name>,<name>...)}. */
    static final String PRUNED_MARK = "#omni-columns(";
    /** View properties that only omni's logical views (and their pinned versions) carry. */
    private static final String[] OMNI_VIEW_PROPERTIES = {"omni.format", "omni.pinned-of"};

    /** The pruned views {@link PruneOmniViews} built in this thread, until Iceberg loads them. */
    private final ThreadLocal<Map<String, View>> staged = ThreadLocal.withInitial(LinkedHashMap::new);

    /** The view {@code ident} if it is an omni logical view, else null (a table, another view, none). */
    View omniView(Identifier ident) {
        View view;
        try {
            view = super.loadView(ident);
        } catch (NoSuchViewException | RuntimeException e) {
            return null;  // not a view here: Spark resolves the name as it would have
        }
        return remember(ident, view) ? view : null;
    }

    /**
     * The properties of omni logical views this catalog loaded, by identifier: the query log's
     * listener ({@link QueryLogListener}) tells omni's views from others by them without loading
     * the view again. Bounded; a view not here is loaded by the listener itself.
     */
    private final Map<String, Map<String, String>> omniViews = new LinkedHashMap<String, Map<String, String>>(64, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Map<String, String>> eldest) {
            return size() > 1024;
        }
    };

    /** Whether {@code view} is an omni logical view; if so its properties are kept for {@link #omniViewProperties}. */
    private boolean remember(Identifier ident, View view) {
        for (String property : OMNI_VIEW_PROPERTIES) {
            if (view.properties().containsKey(property)) {
                synchronized (omniViews) {
                    omniViews.put(key(ident), view.properties());
                }
                return true;
            }
        }
        return false;
    }

    /** The properties of omni logical view {@code ident} (loading it when not seen yet), or null when it is none. */
    Map<String, String> omniViewProperties(Identifier ident) {
        synchronized (omniViews) {
            Map<String, String> known = omniViews.get(key(ident));
            if (known != null) {
                return known;
            }
        }
        View view = omniView(ident);
        return view == null ? null : view.properties();
    }

    /** Keeps {@code pruned} for the next load of the returned marked name, in this thread. */
    String stagePruned(Identifier ident, View pruned) {
        String marked = ident.name() + PRUNED_MARK + String.join(",", pruned.schema().fieldNames()) + ")";
        Map<String, View> mine = staged.get();
        mine.put(key(Identifier.of(ident.namespace(), marked)), pruned);
        while (mine.size() > 16) {  // loaded at once by the same analysis; only a failed one leaves some
            mine.remove(mine.keySet().iterator().next());
        }
        return marked;
    }

    @Override
    public View loadView(Identifier ident) throws NoSuchViewException {
        int at = ident.name().indexOf(PRUNED_MARK);
        if (at < 0) {
            View view = super.loadView(ident);
            remember(ident, view);
            return view;
        }
        View pruned = staged.get().remove(key(ident));
        if (pruned != null) {
            return pruned;
        }
        // analysed again elsewhere (another thread, a re-analysis): cut the current view again
        String columns = ident.name().substring(at + PRUNED_MARK.length(), ident.name().length() - 1);
        View view = super.loadView(Identifier.of(ident.namespace(), ident.name().substring(0, at)));
        Set<String> names = new HashSet<>();
        for (String name : columns.split(",")) {
            names.add(name.toLowerCase(Locale.ROOT));
        }
        View again = ViewPruning.pruned(view, names);
        return again == null ? view : again;
    }

    @Override
    public Table loadTable(Identifier ident) throws NoSuchTableException {
        if (ident.name().contains(PRUNED_MARK)) {
            throw new NoSuchTableException(ident);  // a pruned view's name is never a table
        }
        return super.loadTable(unmarked(ident));
    }

    /**
     * {@code ident} without the mark a cut view puts on the tables it reads
     * ({@link ViewPruning#markTables}): the table is the same; the mark stays in the plan's
     * relation (Spark keeps the name it asked for), where {@link DropContainedDriver} reads it.
     */
    static Identifier unmarked(Identifier ident) {
        int at = ident.name().indexOf(ViewPruning.TABLE_MARK);
        return at < 0 ? ident : Identifier.of(ident.namespace(), ident.name().substring(0, at));
    }

    @Override
    public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
        ident = unmarked(ident);
        if (version == null || version.isEmpty() || !version.chars().allMatch(Character::isDigit)) {
            return super.loadTable(ident, version);  // a branch or a tag: it may move
        }
        String key = key(ident) + "@" + version;
        synchronized (atSnapshot) {
            Table known = atSnapshot.get(key);
            if (known != null) {
                return known;
            }
        }
        Table loaded = super.loadTable(ident, version);
        synchronized (atSnapshot) {
            atSnapshot.put(key, loaded);
        }
        return loaded;
    }

    @Override
    public void invalidateTable(Identifier ident) {
        forget(ident);
        super.invalidateTable(ident);
    }

    @Override
    public boolean dropTable(Identifier ident) {
        forget(ident);
        return super.dropTable(ident);
    }

    @Override
    public boolean purgeTable(Identifier ident) {
        forget(ident);
        return super.purgeTable(ident);
    }

    @Override
    public void renameTable(Identifier from, Identifier to) throws NoSuchTableException, TableAlreadyExistsException {
        forget(from);
        super.renameTable(from, to);
    }

    private void forget(Identifier ident) {
        String prefix = key(ident) + "@";
        synchronized (atSnapshot) {
            for (Iterator<String> it = atSnapshot.keySet().iterator(); it.hasNext(); ) {
                if (it.next().startsWith(prefix)) {
                    it.remove();
                }
            }
        }
    }

    private static String key(Identifier ident) {
        return String.join("\u0000", ident.namespace()) + "\u0001" + ident.name();
    }
}
