package omni.spark;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The body of an omni logical view cut down to the columns one query names.
 *
 * <p>omni writes the Spark body of a logical view (catalog_ext/view_sql.py) in one shape:
 * <pre>
 * SELECT item AS `c1`, item AS `c2`, ... FROM driver AS t0
 *   LEFT JOIN (SELECT keys, any_value(..) .. GROUP BY keys) AS t1 ON t1.keys = t0.keys ...
 * </pre>
 * where each item reads only {@code tN.} columns. Spark drops the unread joins itself, but only
 * after analysing the whole body, and that analysis grows with the family: at 100 physical tables
 * it was 2.3 s of a 3 s query, at 2,500 columns most of 19 s. Cut here, the body Spark analyses
 * holds the named columns and the joins they read, whatever the family's width.
 *
 * <p>The cut is textual on purpose: it needs no SQL grammar, only the separators of that shape
 * at parenthesis depth 0 outside quotes. Any body not in that shape (an older or hand-made view)
 * is returned as null, and the caller keeps the whole view.
 */
final class ViewPruning {

    /** The columns a pruned view always keeps: the family's keys. */
    static final String[] KEYS = {"_ai_unique_id_", "_ai_append_name_"};

    private ViewPruning() {
    }

    /** One select item: its text, its output name and the table aliases it reads. */
    private static final class Item {
        final String text;
        final String name;
        final Set<String> aliases;

        Item(String text, String name, Set<String> aliases) {
            this.text = text;
            this.name = name;
            this.aliases = aliases;
        }
    }

    /** A body split at its separators: select items, the driver, and the joins by alias. */
    static final class Body {
        final List<Item> items = new ArrayList<>();
        String driver;
        final Map<String, String> joins = new HashMap<>();  // alias -> "LEFT JOIN ..." text without the keyword
        final Map<String, Set<String>> joinReads = new HashMap<>();  // alias -> aliases its text reads
        final List<String> joinOrder = new ArrayList<>();
    }

    /** The view's body split into its parts, or null when it is not in omni's shape. */
    static Body parse(String sql) {
        if (sql == null || !sql.startsWith("SELECT ")) {
            return null;
        }
        int from = find(sql, " FROM ", 7);
        if (from < 0) {
            return null;
        }
        Body body = new Body();
        for (String item : split(sql.substring(7, from), ", ")) {
            int as = lastTopLevel(item, " AS ");
            String name = as < 0 ? null : backticked(item.substring(as + 4));
            if (name == null) {
                return null;
            }
            body.items.add(new Item(item, name, aliases(item)));
        }
        List<String> parts = split(sql.substring(from + 6), " LEFT JOIN ");
        body.driver = parts.get(0);
        if (!body.driver.endsWith(" AS t0")) {
            return null;
        }
        for (String join : parts.subList(1, parts.size())) {
            int on = find(join, " ON ", 0);
            if (on < 0) {
                return null;
            }
            String head = join.substring(0, on);
            int as = head.lastIndexOf(" AS ");
            String alias = as < 0 ? null : head.substring(as + 4);
            if (alias == null || !alias.matches("t[0-9]+") || body.joins.containsKey(alias)) {
                return null;
            }
            body.joins.put(alias, join);
            body.joinReads.put(alias, aliases(join.substring(on)));
            body.joinOrder.add(alias);
        }
        for (Item item : body.items) {
            for (String alias : item.aliases) {
                if (!alias.equals("t0") && !body.joins.containsKey(alias)) {
                    return null;
                }
            }
        }
        return body;
    }

    /**
     * The body keeping the items whose name is in {@code names} (lower case) and the keys, with the
     * joins they read; null when that is every item (nothing to cut).
     */
    static String prune(Body body, Set<String> names, List<String> kept) {
        Set<String> keep = new LinkedHashSet<>(names);
        for (String key : KEYS) {
            keep.add(key);
        }
        List<String> items = new ArrayList<>();
        Deque<String> todo = new ArrayDeque<>();
        for (Item item : body.items) {
            if (keep.contains(item.name.toLowerCase(Locale.ROOT))) {
                items.add(item.text);
                kept.add(item.name);
                todo.addAll(item.aliases);
            }
        }
        if (items.size() == body.items.size()) {
            return null;
        }
        Set<String> joined = new LinkedHashSet<>();
        while (!todo.isEmpty()) {  // a join's ON clause may read another join (not in omni's shape today)
            String alias = todo.pop();
            if (!alias.equals("t0") && joined.add(alias)) {
                todo.addAll(body.joinReads.get(alias));
            }
        }
        String token = token(body);
        StringBuilder sql = new StringBuilder("SELECT ").append(String.join(", ", items));
        sql.append(" FROM ").append(markTables(body.driver, token, true));
        String keptText = String.join(", ", items);
        for (String alias : body.joinOrder) {
            if (joined.contains(alias)) {
                String join = trimAggregate(body.joins.get(alias), columnsRead(keptText, alias));
                sql.append(" LEFT JOIN ").append(markTables(join, token, false));
            }
        }
        return sql.toString();
    }

    /**
     * The top-level columns {@code text} reads from {@code alias}: the backquoted name after each
     * {@code alias.} outside quoted text (a struct field read as {@code t1.`Stage`.`f`} reads
     * {@code Stage}), in lower case.
     */
    static Set<String> columnsRead(String text, String alias) {
        Set<String> out = new LinkedHashSet<>();
        String prefix = alias + ".`";
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '\'' || c == '"' || c == '`') {
                int end = skipQuoted(text, i);
                if (end < 0) {
                    break;
                }
                i = end;
            } else if (text.startsWith(prefix, i) && (i == 0 || !isNamePart(text.charAt(i - 1)))) {
                int open = i + prefix.length() - 1;
                int close = skipQuoted(text, open);
                if (close < 0) {
                    break;
                }
                out.add(text.substring(open + 1, close).replace("``", "`").toLowerCase(Locale.ROOT));
                i = close;
            }
        }
        return out;
    }

    /**
     * A join of omni's shape, {@code (SELECT keys, any_value(p.`c`) AS `c`, ... FROM table AS p GROUP
     * BY keys) AS tN ON ...}, keeping in its per-key aggregate only the keys and the columns in
     * {@code read}. Spark would prune the other aggregates after analysis, but analysing them is the
     * cost: a column group holds up to 256 columns, and a query spread over ten groups analysed
     * every one of them. Any other shape is returned unchanged.
     */
    static String trimAggregate(String join, Set<String> read) {
        if (!join.startsWith("(SELECT ")) {
            return join;
        }
        int as = find(join, " AS t", 0);  // after the subquery's closing parenthesis (depth 0)
        if (as < 1 || join.charAt(as - 1) != ')') {
            return join;
        }
        String inner = join.substring(1, as - 1);
        int from = find(inner, " FROM ", 7);
        if (from < 0) {
            return join;
        }
        List<String> kept = new ArrayList<>();
        List<String> all = split(inner.substring(7, from), ", ");
        for (String item : all) {
            int itemAs = lastTopLevel(item, " AS ");
            if (itemAs < 0) {
                kept.add(item);  // a key, selected by its own name
                continue;
            }
            String name = backticked(item.substring(itemAs + 4));
            if (name == null) {
                return join;  // not omni's shape: keep the join whole
            }
            if (read.contains(name.toLowerCase(Locale.ROOT))) {
                kept.add(item);
            }
        }
        if (kept.size() == all.size()) {
            return join;
        }
        return "(SELECT " + String.join(", ", kept) + inner.substring(from) + join.substring(as - 1);
    }

    /** Marks a table name read by a cut view: {@code <table>#omni-view(<token>,driver|member)}. */
    static final String TABLE_MARK = "#omni-view(";
    private static final Pattern TABLE_REF =
            Pattern.compile("(`[^`]+`\\.`[^`]+)`(?= VERSION AS OF | AS )");

    /**
     * {@code text} with each table it names marked with the view's {@code token} and its role.
     * Tables marked with one token were pinned by one logical version, so every row of a member
     * table has its keys in the driver (omni's invariant): {@link DropContainedDriver} may then
     * drop the driver from an inner join on the keys. The catalog strips the mark when loading.
     */
    static String markTables(String text, String token, boolean driver) {
        String mark = TABLE_MARK + token + (driver ? ",driver)" : ",member)");
        return TABLE_REF.matcher(text).replaceAll("$1" + mark + "`");  // hex token and role: no $ or \\
    }

    /** One view body (one logical version's pinned snapshots): a digest of its text. */
    private static String token(Body body) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            StringBuilder all = new StringBuilder(body.driver);
            for (String alias : body.joinOrder) {
                all.append('\u0000').append(body.joins.get(alias));
            }
            byte[] digest = md.digest(all.toString().getBytes(StandardCharsets.UTF_8));
            StringBuilder hex = new StringBuilder();
            for (int i = 0; i < 8; i++) {
                hex.append(String.format("%02x", digest[i]));
            }
            return hex.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** {@code view} with the pruned body and the matching schema, or null to keep the whole view. */
    static View pruned(View view, Set<String> names) {
        Body body = parse(view.query());
        if (body == null) {
            return null;
        }
        List<String> kept = new ArrayList<>();
        String sql = prune(body, names, kept);
        if (sql == null) {
            return null;
        }
        StructType full = view.schema();
        List<StructField> fields = new ArrayList<>();
        for (String name : kept) {
            Integer at = fieldIndex(full, name);
            if (at == null) {
                return null;  // the schema and the body disagree: keep the whole view
            }
            fields.add(full.fields()[at]);
        }
        return new PrunedView(view, sql, new StructType(fields.toArray(new StructField[0])));
    }

    private static Integer fieldIndex(StructType schema, String name) {
        StructField[] fields = schema.fields();
        for (int i = 0; i < fields.length; i++) {
            if (fields[i].name().equals(name)) {
                return i;
            }
        }
        return null;
    }

    /** A view that is another one with a cut body and schema (names, catalog, properties kept). */
    static final class PrunedView implements View {
        private final View view;
        private final String query;
        private final StructType schema;

        PrunedView(View view, String query, StructType schema) {
            this.view = view;
            this.query = query;
            this.schema = schema;
        }

        @Override
        public String name() {
            return view.name();
        }

        @Override
        public String query() {
            return query;
        }

        @Override
        public String currentCatalog() {
            return view.currentCatalog();
        }

        @Override
        public String[] currentNamespace() {
            return view.currentNamespace();
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public String[] queryColumnNames() {
            return schema.fieldNames();
        }

        @Override
        public String[] columnAliases() {
            return new String[0];
        }

        @Override
        public String[] columnComments() {
            return new String[0];
        }

        @Override
        public Map<String, String> properties() {
            return view.properties();
        }
    }

    // ---- the lexical scan: depth-0 separators outside quoted text -------------------------------

    /** Index of the first {@code sep} at depth 0 outside quotes, from {@code start}; -1 if none. */
    static int find(String s, String sep, int start) {
        int depth = 0;
        for (int i = start; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\'' || c == '"' || c == '`') {
                i = skipQuoted(s, i);
                if (i < 0) {
                    return -1;
                }
            } else if (c == '(') {
                depth++;
            } else if (c == ')') {
                depth--;
            } else if (depth == 0 && s.startsWith(sep, i)) {
                return i;
            }
        }
        return -1;
    }

    /** {@code s} split at every depth-0 {@code sep}. */
    static List<String> split(String s, String sep) {
        List<String> out = new ArrayList<>();
        int start = 0;
        while (true) {
            int at = find(s, sep, start);
            if (at < 0) {
                out.add(s.substring(start));
                return out;
            }
            out.add(s.substring(start, at));
            start = at + sep.length();
        }
    }

    private static int lastTopLevel(String s, String sep) {
        int last = -1;
        int at = find(s, sep, 0);
        while (at >= 0) {
            last = at;
            at = find(s, sep, at + 1);
        }
        return last;
    }

    /** Index of the closing quote of the quoted text opening at {@code i}; -1 if unclosed. */
    private static int skipQuoted(String s, int i) {
        char q = s.charAt(i);
        for (int j = i + 1; j < s.length(); j++) {
            char c = s.charAt(j);
            if (c == '\\' && q != '`') {
                j++;  // Spark string literals escape with a backslash
            } else if (c == q) {
                if (j + 1 < s.length() && s.charAt(j + 1) == q) {
                    j++;  // a doubled quote is the quote itself
                } else {
                    return j;
                }
            }
        }
        return -1;
    }

    /** The name in a whole-string backquoted identifier ({@code `a``b`} is a`b), else null. */
    private static String backticked(String s) {
        if (s.length() < 2 || s.charAt(0) != '`' || skipQuoted(s, 0) != s.length() - 1) {
            return null;
        }
        return s.substring(1, s.length() - 1).replace("``", "`");
    }

    /** The aliases {@code tN} that {@code s} reads as {@code tN.} outside quoted text. */
    static Set<String> aliases(String s) {
        Set<String> out = new LinkedHashSet<>();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\'' || c == '"' || c == '`') {
                int end = skipQuoted(s, i);
                if (end < 0) {
                    break;
                }
                i = end;
            } else if (c == 't' && (i == 0 || !isNamePart(s.charAt(i - 1)))) {
                int j = i + 1;
                while (j < s.length() && Character.isDigit(s.charAt(j))) {
                    j++;
                }
                if (j > i + 1 && j < s.length() && s.charAt(j) == '.') {
                    out.add(s.substring(i, j));
                }
            }
        }
        return out;
    }

    private static boolean isNamePart(char c) {
        return Character.isLetterOrDigit(c) || c == '_';
    }
}
