"""Every knob of omni, declared once: name, type, default, unit and meaning.

A setting is read from, in order:

1. the environment (``OMNI_INDEX=off``);
2. the ``omni:`` section of ``.pyiceberg.yaml``, found the way pyiceberg finds it
   (``$PYICEBERG_HOME``, the home folder, the working folder), under the variable's name
   without ``OMNI_``, lower case, dashes for underscores (``index: off``,
   ``index-timeout-ms: 2000``);
3. the default declared here.

An explicit argument of the Python API or a CLI flag still wins over all three; that is
the caller's business. A value that does not parse is a :class:`ConfigError` naming the
variable, its value and what it expects. ``omni config`` prints every setting with its
value and where that value came from; README's table of settings is generated from
:data:`SETTINGS` (``python -m catalog_ext.settings --markdown``) and a test holds the two
equal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from catalog_ext.errors import ConfigError

Kind = Literal["str", "int", "float", "bool", "path"]
Source = Literal["environment", "file", "default"]

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class Setting(BaseModel):
    """One knob: its environment variable, type, default, unit and what it changes."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Kind
    default: Any
    meaning: str
    area: str
    unit: str = ""
    minimum: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def file_key(self) -> str:
        """The key of this setting in the ``omni:`` section of ``.pyiceberg.yaml``."""
        return self.name.removeprefix("OMNI_").lower().replace("_", "-")

    def parse(self, raw: str, where: str) -> Any:
        """``raw`` as this setting's type; a :class:`ConfigError` naming the variable when it is not."""
        text = raw.strip()
        if self.kind in ("str", "path"):
            if self.choices and text.lower() not in self.choices:
                raise ConfigError(f"{self.name}={raw!r} ({where}): expected one of {', '.join(self.choices)}")
            return text
        if self.kind == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ConfigError(f"{self.name}={raw!r} ({where}): expected 1/0, true/false, yes/no or on/off")
        try:
            value: float = _whole(text) if self.kind == "int" else float(text)
        except ValueError:
            whole = "a whole number" if self.kind == "int" else "a number"
            raise ConfigError(f"{self.name}={raw!r} ({where}): expected {whole}"
                              + (f" of {self.unit}" if self.unit else "")) from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}={raw!r} ({where}): must be >= {self.minimum:g}")
        return value


def _whole(text: str) -> int:
    """A whole number, also written as ``1e12`` or ``256.0`` (byte counts are often written so)."""
    try:
        return int(text)
    except ValueError:
        number = float(text)
        if not number.is_integer():
            raise
        return int(number)


def _s(name: str, kind: Kind, default: Any, area: str, meaning: str, unit: str = "",
       minimum: float | None = None, choices: Iterable[str] = ()) -> Setting:
    return Setting(name=name, kind=kind, default=float(default) if kind == "float" else default, area=area, meaning=meaning, unit=unit,
                   minimum=minimum, choices=tuple(choices))


_HOUR, _DAY = 3600, 24 * 3600

#: every setting omni reads, by variable name; README's table is generated from this
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    # where things live
    _s("OMNI_HOME", "path", ".omni", "catalog",
       "folder of the embedded catalog; the default warehouse, id index and hot store live under it"),
    _s("OMNI_CATALOG", "str", "", "catalog",
       "the catalog: a SQLAlchemy URI, a REST URL or a .pyiceberg.yaml catalog name; empty: SQLite under the home"),
    _s("OMNI_WAREHOUSE", "str", "", "catalog", "where data files go; empty: warehouse/ under the home"),
    _s("OMNI_CATALOG_NAME", "str", "omni", "catalog",
       "the catalog's name as engines see it (Spark and Trino must use the same one)"),
    _s("OMNI_DEBUG", "bool", False, "catalog", "print the traceback of an unexpected failure"),
    # reading and writing Iceberg
    _s("OMNI_WRITE_BUFFER_BYTES", "int", 128 << 20, "io",
       "rows held per physical table before a data file is written; unset: the lesser of this and "
       "OMNI_MEMORY_LIMIT_MB / 16", "bytes", 1),
    _s("OMNI_MEMORY_LIMIT_MB", "float", 1024.0, "io",
       "memory one local operation may hold (DuckDB's memory limit, read slices, export and sync parts); "
       "beyond it DuckDB spills under the home and readers slice smaller", "MiB", 64),
    _s("OMNI_FOOTER_CACHE_MB", "float", 64.0, "io", "Parquet footers kept in memory between reads", "MiB", 0),
    _s("OMNI_READ_BY_NAME", "bool", True, "io",
       "read data files by column name when their field ids match the table's (the Iceberg spec's fast path)"),
    _s("OMNI_QUERY_LOG_FLUSH_ROWS", "int", 200, "io",
       "query-log rows spooled on local disk before one commit into omni_sys.query_log", "rows", 1),
    _s("OMNI_QUERY_LOG_FLUSH_S", "float", 60.0, "io",
       "age of the oldest spooled query-log row that forces a flush", "seconds", 0),
    # staging branches and orphan files
    _s("OMNI_STAGE_GRACE_S", "float", 2 * _HOUR, "staging",
       "a backfill's staging branch untouched this long counts as abandoned", "seconds", 0),
    _s("OMNI_STAGE_INGEST_GRACE_S", "float", 600.0, "staging",
       "the same for an ingest's branch, which lives only while its commit runs", "seconds", 0),
    _s("OMNI_STAGE_TTL_S", "float", 7 * _DAY, "staging", "abandoned staging branches are dropped after this",
       "seconds", 0),
    _s("OMNI_ORPHAN_GRACE_S", "float", 3 * _DAY, "staging",
       "files younger than this are never swept as orphans (a live writer may still commit them)", "seconds", 0),
    # the id index
    _s("OMNI_INDEX", "str", "lmdb", "index",
       "id index backend: lmdb, lmdb:///FOLDER, hbase://HOST:PORT, or off"),
    _s("OMNI_INDEX_TIMEOUT_MS", "int", 5000, "index", "bound on every HBase connect and call", "ms", 1),
    _s("OMNI_HBASE_CONF", "path", "", "index", "folder holding the cluster's hbase-site.xml (pre-splits new tables)"),
    _s("OMNI_INDEX_SEAL_MIN_ENTRIES", "int", 100_000, "index",
       "maintain seals the LMDB index into a sorted segment once this many entries are unsealed", "entries", 0),
    # ingest: what a submitted file may make a submit hold
    _s("OMNI_MAX_DOCUMENT_BYTES", "int", 256 << 20, "ingest",
       "a file read whole as one record (HTML page, code file, PDF) larger than this is a reject, never read",
       "bytes", 1),
    _s("OMNI_MAX_RECORD_BYTES", "int", 64 << 20, "ingest",
       "a JSONL or CSV line or a WARC response body longer than this (after decompression) is a reject, "
       "never held whole", "bytes", 1),
    # backfills
    _s("OMNI_SLICE_ROWS", "int", 8192, "backfill", "rows per slice a worker computes at most", "rows", 1),
    _s("OMNI_TARGET_SLICE_S", "float", 30.0, "backfill",
       "adaptive tuning sizes slices to take about this long", "seconds", 0),
    _s("OMNI_TUNING", "str", "on", "backfill", "adaptive tuning from run history: on or off", choices=("on", "off")),
    _s("OMNI_AUTO_GPU_MODEL_MB", "float", 50.0, "backfill",
       "a feature placed dynamically goes to a GPU when its model is at least this large", "MiB", 0),
    _s("OMNI_GPU_MEMORY_FACTOR", "float", 2.0, "backfill",
       "a feature placed dynamically goes to a GPU only when the GPU's free memory is at least this many times "
       "its model's size (weights, activations, the CUDA context)", "x", 1),
    _s("OMNI_FORCE_CPU", "bool", False, "backfill", "run every feature on CPU, whatever the plan says"),
    _s("OMNI_SPARK_THRESHOLD_BYTES", "int", 1 << 40, "backfill",
       "--engine auto picks Spark from this much input up", "bytes", 0),
    # exploring
    _s("OMNI_EXPORT_WRITERS", "int", 0, "explore", "files an export writes at once; 0: one per core, at most 8",
       "files", 0),
    _s("OMNI_HOT", "str", "", "explore",
       "hot store for hot feature columns: chdb://FOLDER or clickhouse://HOST:PORT; empty: chdb under the home"),
    # governance
    _s("OMNI_RETENTION_KEEP_LAST", "int", 100, "governance", "logical versions retention keeps", "versions", 1),
    _s("OMNI_RETENTION_MIN_AGE_S", "float", float(_HOUR), "governance",
       "a version younger than this is never expired", "seconds", 0),
    _s("OMNI_COMPACT_MIN_FILES", "int", 4, "governance",
       "maintain compacts a partition holding at least this many small files", "files", 2),
    _s("OMNI_AUTO_MAINTAIN_EVERY", "int", 0, "governance",
       "run maintain after every N logical versions; 0: never automatically", "versions", 0),
    _s("OMNI_AUTO_MAINTAIN_BUDGET_S", "float", 60.0, "governance",
       "time an automatic maintain may take before it stops between steps", "seconds", 0),
    _s("OMNI_GROUP_DUE_TABLES", "int", 8, "governance",
       "maintain regroups feature tables once a family has this many", "tables", 2),
    # 40, not 50: Trino plans SELECT * over the view as 3 stages per physical table, so it passes
    # its default cap of 150 stages at 50 tables and is refused at 51 (benchmarks/RESULTS.md
    # #table_bound); the rest is headroom for the stages of the query's own joins and aggregates
    _s("OMNI_FAMILY_MAX_TABLES", "int", 40, "governance",
       "maintain merges the least-read feature tables into column groups while the view reads more physical "
       "tables than this (Trino's SELECT * passes its default 150-stage cap near 50)", "tables", 2),
    _s("OMNI_COREAD_MIN_READS", "int", 3, "governance",
       "logged reads before a set of columns counts as co-read", "queries", 1),
    _s("OMNI_COREAD_WINDOW_DAYS", "float", 7.0, "governance", "how far back the co-read analysis looks", "days", 0),
    _s("OMNI_BUCKET_TARGET_MB", "float", 256.0, "governance",
       "re-bucketing aims at buckets of the largest table of about this size", "MiB", 1),
    # Spark
    _s("OMNI_SPARK_EXECUTOR_WAIT_S", "float", 120.0, "spark",
       "how long a Spark backfill waits for executors to register", "seconds", 0),
    _s("OMNI_SPARK_GPUS_PER_TASK", "float", 1.0, "spark", "GPUs a Spark task of a GPU feature asks for", "GPUs", 0),
    _s("OMNI_SPARK_EXTENSION", "bool", True, "spark",
       "add omni's Spark SQL extension (view cutting, containment proofs) to every session"),
    _s("OMNI_SPARK_JVM", "str", "production", "spark",
       "JVM flags of Spark's driver and executors: production (C2 JIT, G1 collector) or fast-start "
       "(C1 JIT only, serial collector: starts faster, runs long work slower; the test suite's)",
       choices=("production", "fast-start")),
    _s("OMNI_SPARK_MEMORY_MB", "float", 0.0, "spark",
       "heap of the Spark driver (a local master's executors run in it); 0: a quarter of this machine's memory, "
       "at least 1 GiB", "MiB", 0),
    # tooling: where `make` puts jars, servers, models and corpora
    _s("OMNI_CACHE", "path", ".cache", "tooling",
       "cache of jars, servers, derived model files and corpora"),
    _s("OMNI_MAVEN_REPO", "str", "https://repo1.maven.org/maven2", "tooling", "Maven repository jars come from"),
    _s("OMNI_JAVA", "path", "java", "tooling",
       "the java that runs HBase's RegionSplitter (pre-split index tables) and the test servers"),
)}


@dataclass(frozen=True)
class SettingValue:
    """A setting as it stands now: its value and where that came from."""

    setting: Setting
    value: Any
    source: Source
    raw: str | None

    def as_dict(self) -> dict[str, Any]:
        """For ``omni config --json``; a string value has its credentials masked (a catalog URI's password)."""
        from catalog_ext.redact import redact

        s = self.setting
        return {"name": s.name, "value": redact(self.value) if isinstance(self.value, str) else self.value,
                "source": self.source, "default": s.default, "unit": s.unit, "area": s.area,
                "meaning": s.meaning, "file_key": s.file_key}


_file_cache: tuple[tuple, dict[str, Any]] | None = None


def _file_section() -> dict[str, Any]:
    """The ``omni:`` section of the first ``.pyiceberg.yaml`` pyiceberg would read (cached by mtime)."""
    global _file_cache
    dirs = [os.environ.get("PYICEBERG_HOME"), os.path.expanduser("~"), os.getcwd()]
    found = next((p for d in dirs if d and (p := Path(d) / ".pyiceberg.yaml").is_file()), None)
    key = (str(found), found.stat().st_mtime_ns if found else None)
    if _file_cache is not None and _file_cache[0] == key:
        return _file_cache[1]
    section: dict[str, Any] = {}
    if found is not None:
        import strictyaml  # pyiceberg's own YAML reader

        try:
            data = strictyaml.load(found.read_text(encoding="utf-8")).data
        except Exception as e:  # noqa: BLE001 - any malformed yaml is a config error
            raise ConfigError(f"cannot read {found}: {e}") from e
        raw = {str(k).lower(): v for k, v in data.items()}.get("omni") if isinstance(data, dict) else None
        section = {str(k).lower(): v for k, v in raw.items()} if isinstance(raw, dict) else {}
    _file_cache = (key, section)
    return section


def lookup(name: str) -> SettingValue:
    """The setting ``name``'s value and source (environment, then ``.pyiceberg.yaml``, then default)."""
    try:
        setting = SETTINGS[name]
    except KeyError:
        raise ConfigError(f"unknown setting {name!r}") from None
    raw = os.environ.get(name)
    if raw is not None and raw.strip() != "":
        return SettingValue(setting, setting.parse(raw, "environment"), "environment", raw)
    in_file = _file_section().get(setting.file_key)
    if in_file is not None and str(in_file).strip() != "":
        return SettingValue(setting, setting.parse(str(in_file), f".pyiceberg.yaml omni.{setting.file_key}"),
                            "file", str(in_file))
    return SettingValue(setting, setting.default, "default", None)


def value(name: str) -> Any:
    """The value of setting ``name``, parsed and checked."""
    return lookup(name).value


def current() -> list[SettingValue]:
    """Every setting as it stands now, in declaration order."""
    return [lookup(name) for name in SETTINGS]


def markdown_table() -> str:
    """README's table of settings, generated from :data:`SETTINGS`."""
    lines = ["| variable | default | unit | what it changes |", "|---|---|---|---|"]
    for s in SETTINGS.values():
        default = "(empty)" if s.default == "" else f"`{s.default}`"
        lines.append(f"| `{s.name}` | {default} | {s.unit} | {s.meaning} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown_table())
    else:
        sys.exit("usage: python -m catalog_ext.settings --markdown")
