"""Text renderings of command results (the JSON renderings are the results themselves)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import IO, Any


def ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def submit_text(r: Any) -> str:
    if r.already_committed:
        return f"batch {r.batch!r} already committed at version {r.logical_version}; nothing to do"
    if r.logical_version is None:  # every record was a duplicate: the pipeline committed nothing
        rejected = f", {r.rejected} rejected" if r.rejected else ""
        return (f"{r.logical_table} batch {r.batch!r}: 0 new records, {r.duplicates} duplicates{rejected}; "
                f"nothing committed (the batch name is still free)")
    return (f"{r.logical_table} batch {r.batch!r}: read {r.read}, written {r.written}, duplicates {r.duplicates}, "
            f"rejected {r.rejected} -> version {r.logical_version} ({r.seconds:.1f}s)")


def _where(column: dict) -> str:
    if column["kind"] == "key":
        return "(every physical table)"
    return ", ".join(column["physical"]) or "(not computed yet: reads as NULL)"


def status_text(st: dict) -> str:
    lines = [f"{st['logical_table']}  version {st['logical_version']}  rows {st['rows']}  id {st['id_mode']}"]
    lines.append("batches:")
    lines += [f"  {b['name']:<16} rows {b['rows']:>8}  dup {b['duplicates']:>6}  rejected {b['rejected']:>5}  v{b['version']}"
              for b in st["batches"]] or ["  (none)"]
    lines.append("columns:")
    lines += [f"  {c['path']:<32} {c['type']:<8} {c['kind']:<8} {_where(c)}" for c in st["columns"]]
    lines.append("physical tables:")
    lines += [f"  {t['identifier']:<32} snapshot {t['snapshot_id']}  files {t['files']}  bytes {t['bytes']}"
              for t in st["physical_tables"]]
    return "\n".join(lines)


def log_text(versions: list[dict], tags: dict[str, int]) -> str:
    by_version: dict[int, list[str]] = {}
    for label, v in tags.items():
        by_version.setdefault(v, []).append(label)
    return "\n".join(
        f"v{v['version']:<4} {ts(v['committed_ms'])}  {v['operation']:<8} {v['command']}"
        + (f"  [tags: {', '.join(sorted(by_version[v['version']]))}]" if v["version"] in by_version else "")
        + (f"  [expired versions: {v['summary']['omni.expired-versions']}]"
           if "omni.expired-versions" in v.get("summary", {}) else "")
        for v in versions)


def udfs_text(udfs: list[dict]) -> str:
    lines = []
    for u in udfs:
        outs = ", ".join(f"{o['name']} ({o['type']})" for o in u["outputs"]) or "-"
        lines.append(f"{u['name']:<22} {u['form']:<6} {u['engine'] or '-':<5} {', '.join(u['inputs'])} -> {outs}")
    return "\n".join(lines)


def features_text(feats: list[dict]) -> str:
    lines = []
    for f in feats:
        status = f" [{f['status']}]" if f.get("status") else ""
        lines.append(f"{f['name']}@{f['version']}{'' if f['current'] else ' (old)'}{status}  {f['engine']:<4} "
                     f"{', '.join(f['inputs'])} -> {', '.join(f['outputs'])}  "
                     f"computed: {', '.join(f['computed_batches']) or '-'}")
        for batch, why in (f.get("stale") or {}).items():
            lines.append(f"    stale on {batch}: {why}")
    return "\n".join(lines) or "(no features)"


def compact_text(r: dict, min_files: int) -> str:
    """``omni compact``: per physical table, the files before and after, and the new version."""
    plan = r["plan"]
    removed = [b for b in (r.get("cleanup") or {}).get("branches", []) if b.get("removed")]
    orphans = (r.get("cleanup") or {}).get("orphan_files_deleted", 0)
    cleaned = [f"removed {len(removed)} stale staging branch(es)"] if removed else []
    cleaned += [f"deleted {orphans} orphan file(s)"] if orphans else []
    tail = [f"  leftovers: {'; '.join(cleaned)}"] if cleaned else []
    if not plan["tables"]:
        return "\n".join([f"{plan['logical_table']} v{plan['version']}: nothing to compact (no partition holds "
                          f"{min_files} or more small files; see --min-files)"] + tail)
    lines = [f"compacted {plan['logical_table']} -> version {r['logical_version']} "
             f"(engine {r['engine']}: {r['engine_reason']})"]
    for t in plan["tables"]:
        merged = sum(p["files"] for p in t["partitions"])
        lines.append(f"  {t['identifier']}: {t['files_before']} files -> {r['files_after'].get(t['identifier'], '?')} "
                     f"({merged} small files merged in {len(t['partitions'])} partition group(s))")
    return "\n".join(lines + tail)


def retry_text(report: Any, features: list[str]) -> str:
    if report.status == "nothing to do":
        return (f"{report.logical_table}: nothing to retry: no record of {', '.join(features)} failed without "
                "getting a value since; nothing committed")
    return (f"{report.logical_table}: retry {report.status}; recomputed {report.rows}, still failing {report.errors} "
            f"-> version {report.logical_version}")


def backfill_text(report: Any, batches: list[str] | None) -> str:
    if report.status == "nothing to do":
        which = f"batches {', '.join(batches)}" if batches else "every batch"
        return (f"{report.logical_table}: nothing to do: every requested feature is up to date for {which} "
                f"(version {report.plan.get('base_version')}); nothing committed")
    return (f"{report.logical_table}: {report.status} on the {report.engine} engine ({report.engine_reason}); "
            f"run {report.run_id}, rows {report.rows}, errors {report.errors}, "
            f"reused {report.reused}, resumed units {report.resumed_units} -> version {report.logical_version}"
            + (f"; registered first: {', '.join(report.registered)}" if report.registered else "")
            + ("" if not report.errors else f"\nsee: omni errors {report.logical_table} --run {report.run_id}"))


def drop_text(r: dict) -> str:
    gone = f"; already gone: {', '.join(r['already_gone'])}" if r["already_gone"] else ""
    how = f"purged ({r['files_deleted']} metadata files deleted, data files removed)" if r["purged"] else (
        "data files kept on storage (use --purge to delete them)")
    return f"dropped {r['logical_table']} and {len(r['physical_tables'])} physical tables; {how}{gone}"


def settings_text(rows: list[dict]) -> str:
    """``omni config``: one line per setting, grouped by area; values that are not the default are marked."""
    width = max(len(r["name"]) for r in rows)
    lines, area = [], None
    for r in rows:
        if r["area"] != area:
            area = r["area"]
            lines += ([""] if lines else []) + [f"[{area}]"]
        value = "(empty)" if r["value"] == "" else str(r["value"])
        unit = f" {r['unit']}" if r["unit"] and r["value"] != "" else ""
        where = "" if r["source"] == "default" else f"   <- {r['source']}"
        lines.append(f"  {r['name']:<{width}}  {value}{unit}{where}")
    return "\n".join(lines)


#: rows of a table-format answer whose widths are measured before the first line is printed
TABLE_WINDOW = 10_000


def sql_rows(reader: Any, fmt: str, out: IO[str], window: int = TABLE_WINDOW, max_width: int = 60) -> int:
    """``omni sql``: write the answer's rows to ``out`` as its record batches arrive; returns the rows.

    json and csv write each row as it comes. The aligned table measures its column widths
    on the first ``window`` rows: an answer that ends within them prints exactly as
    :func:`omni_iceberg.ui.formatting.format_arrow` would print it whole; a longer one keeps
    those widths (a wider cell later pushes only its own line), so memory stays at one window.
    """
    from omni_iceberg.ui.formatting import dumps

    names = reader.schema.names
    rows = 0
    if fmt == "json":
        for batch in reader:
            for row in batch.to_pylist():
                out.write(dumps(row) + "\n")
            rows += batch.num_rows
        if not rows:
            out.write("\n")  # the whole-answer rendering printed one empty line
        return rows
    if fmt == "csv":
        import csv

        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        for batch in reader:
            writer.writerows(batch.to_pylist())
            rows += batch.num_rows
        return rows
    cell = lambda v: _cell(v, max_width)  # noqa: E731
    held: list[list[str]] = []
    batches = iter(reader)
    for batch in batches:
        held += [[cell(r[c]) for c in names] for r in batch.to_pylist()]
        if len(held) >= window:
            break
    widths = [max([len(c)] + [len(row[i]) for row in held]) for i, c in enumerate(names)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + "\n"  # noqa: E731
    out.write(line(names) + "-+-".join("-" * w for w in widths) + "\n")
    out.writelines(line(r) for r in held)
    rows = len(held)
    held.clear()
    for batch in batches:
        out.writelines(line([cell(r[c]) for c in names]) for r in batch.to_pylist())
        rows += batch.num_rows
    out.write(f"({rows} row{'s' if rows != 1 else ''})\n")
    return rows


def _cell(value: Any, max_width: int) -> str:
    """A table cell as ``format_arrow`` writes it (tests/test_sql_streaming.py holds the two equal)."""
    text = "NULL" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= max_width else text[: max_width - 1] + "…"
