package omni.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.connector.catalog.CatalogManager;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.connector.catalog.Identifier;

/**
 * A multipart table name resolved the way Spark resolves one: a registered catalog's name
 * first, else the current catalog, with the current namespace before a bare name. The view
 * pruning rule and the query-log listener both need it to find omni's views.
 */
record CatalogPath(CatalogPlugin catalog, List<String> path) {

    static CatalogPath of(List<String> parts, CatalogManager catalogs) {
        if (parts.size() > 1 && catalogs.isCatalogRegistered(parts.get(0))) {
            return new CatalogPath(catalogs.catalog(parts.get(0)), parts.subList(1, parts.size()));
        }
        List<String> path = new ArrayList<>(parts.size() == 1 ? Arrays.asList(catalogs.currentNamespace()) : List.of());
        path.addAll(parts);
        return new CatalogPath(catalogs.currentCatalog(), path);
    }

    /** The omni catalog it names with a namespace and a name, else null. */
    OmniSparkCatalog omniCatalog() {
        return catalog instanceof OmniSparkCatalog && path.size() >= 2 ? (OmniSparkCatalog) catalog : null;
    }

    Identifier identifier() {
        return Identifier.of(path.subList(0, path.size() - 1).toArray(new String[0]), path.get(path.size() - 1));
    }
}
