package omni.spark;

import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.iceberg.spark.SparkCatalog;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;

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
 */
public class OmniSparkCatalog extends SparkCatalog {

    private static final int MAX_TABLES = 4096;

    private final Map<String, Table> atSnapshot = new LinkedHashMap<String, Table>(256, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Table> eldest) {
            return size() > MAX_TABLES;
        }
    };

    @Override
    public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
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
