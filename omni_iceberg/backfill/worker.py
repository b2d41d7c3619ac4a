"""Stage workers: evaluate every feature of a fused stage on one slice of rows.

``InlineWorker`` runs in the calling process. ``ProcessWorker`` runs the UDFs in a
child process (spawned, so no inherited locks): models load once per stage in the
child, and a UDF that kills its process (segfault, OOM killer) ends the backfill with
a clear :class:`WorkerCrashedError` instead of taking the caller down - nothing is
committed, finished units stay checkpointed, and a rerun resumes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, RAW_STAGE, READER_RAW_FIELDS
from omni_iceberg.backfill.evaluate import FeatureRunner, RecordFailure
from catalog_ext.errors import OmniError
from omni_iceberg.features.shared import SharedBatch
from omni_iceberg.features.spec import FeatureDefinition
from omni_iceberg.features.udf import UdfSpec


class WorkerCrashedError(OmniError):
    """The process running a stage's UDFs died (``signal``: the signal that killed it, if one did)."""

    exit_code = 5

    def __init__(self, message: str, signal: int | None = None):
        super().__init__(message)
        self.signal = signal

    @property
    def out_of_memory(self) -> bool:
        """Killed by SIGKILL: what the kernel's out-of-memory killer sends (and a container's memory limit)."""
        return self.signal == 9


@dataclass
class SliceResult:
    outputs: dict[str, pa.Table] = field(default_factory=dict)  # feature -> rows (keys + physical outputs)
    failures: dict[str, list[tuple[str, RecordFailure]]] = field(default_factory=dict)  # feature -> (id, failure)
    filtered: dict[str, int] = field(default_factory=dict)


#: inputs a row is computed without: what a reader knew about the raw content (its content
#: type), NULL where it knew nothing - the UDF decides then (html_parser sniffs)
OPTIONAL_INPUTS = frozenset(f"{RAW_STAGE}.{name}" for name in READER_RAW_FIELDS)


def _filter_mask(definition: FeatureDefinition, data: pa.Table) -> pa.Array | None:
    """Rows to compute: every input non-null (SQL semantics: null in, null out; not the
    :data:`OPTIONAL_INPUTS`) and the filter true."""
    import pyarrow.compute as pc

    mask = None
    for path in definition.inputs:
        if path in OPTIONAL_INPUTS:
            continue
        valid = pc.is_valid(data.column(path))
        mask = valid if mask is None else pc.and_(mask, valid)
    if not definition.filter:
        return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    from omni_iceberg.read.guard import filter_query
    from omni_iceberg.read.sandbox import locked_duckdb

    names = [p.rsplit(".", 1)[-1] for p in definition.inputs]
    # the filter text is user input: parsed and checked like omni sql, run on a locked DuckDB
    sql = filter_query(definition.filter, names, "rows_in", f"feature {definition.name}@{definition.version}")
    con = locked_duckdb({"rows_in": pa.Table.from_arrays([data.column(p) for p in definition.inputs], names=names)})
    try:
        chosen = con.sql(sql).to_arrow_table().column(0)
    finally:
        con.close()
    return pc.and_(mask, chosen).combine_chunks() if mask is not None else chosen.combine_chunks()


def compute_slice(runners: dict[str, FeatureRunner], features: list[str], data: pa.Table) -> SliceResult:
    """Evaluate ``features`` on ``data`` (keys + every input column, named by logical path).

    The slice is cut into chunks of the stage's largest batch size, and every feature sees
    the SAME :class:`SharedBatch` per chunk: that is what lets fused features share their
    intermediate results (a feature with a smaller batch size splits its chunk further).
    """
    size = max((runners[f].definition.batch_size for f in features if runners[f].spec.form != "row"),
               default=max(1, data.num_rows)) or 1
    parts: dict[str, list[pa.Table]] = {f: [] for f in features}
    result = SliceResult(failures={f: [] for f in features})
    for start in range(0, data.num_rows, size):
        _compute_chunk(runners, features, data.slice(start, size), parts, result)
    for name in features:
        result.outputs[name] = pa.concat_tables(parts[name]) if parts[name] else None
    return result


def _compute_chunk(runners, features: list[str], data: pa.Table, parts: dict[str, list[pa.Table]],
                   result: SliceResult) -> None:
    import pyarrow.compute as pc

    shared_cols = {name: data.column(name).to_pylist() for name in data.column_names
                   if name not in (ID_COLUMN, BATCH_COLUMN)}
    shared = SharedBatch(shared_cols)  # one per chunk, for every feature of the stage
    for name in features:
        runner = runners[name]
        d = runner.definition
        rows = data
        mask = _filter_mask(d, data)
        local_shared = shared
        if mask is not None and not pc.all(mask).as_py():
            rows = data.filter(mask)
            result.filtered[name] = result.filtered.get(name, 0) + data.num_rows - rows.num_rows
            local_shared = SharedBatch({k: rows.column(k).to_pylist() for k in shared_cols})
        if rows.num_rows == 0:
            continue
        arrays, failures = runner.run([rows.column(p).combine_chunks() for p in d.inputs], local_shared)
        row_ids = rows.column(ID_COLUMN)
        keep = pa.array([True] * rows.num_rows)
        if failures:
            bad = {f.row for f in failures}
            keep = pa.array([i not in bad for i in range(rows.num_rows)])
        parts[name].append(pa.Table.from_arrays(
            [row_ids, rows.column(BATCH_COLUMN)] + arrays,
            names=[ID_COLUMN, BATCH_COLUMN] + [o.name.rsplit(".", 1)[-1] for o in d.outputs],
        ).filter(keep))
        result.failures[name] += [(row_ids[f.row].as_py(), f) for f in failures]


class InlineWorker:
    """A stage's UDFs in this process; ``device`` is the stage's planned device (see FeatureRunner)."""

    def __init__(self, definitions: list[FeatureDefinition], specs: dict[str, UdfSpec], device: str | None = None):
        self.runners = {d.name: FeatureRunner(d, specs[d.name], device) for d in definitions}
        self.definitions = list(definitions)
        self.specs = specs
        self.device = device

    def wait_ready(self) -> None:
        pass  # nothing starts: the UDFs run here

    def load(self, definitions: list[FeatureDefinition], specs: dict[str, UdfSpec], label: str = "",
             device: str | None = None) -> None:
        """Hold another stage's features instead (see :meth:`ProcessWorker.load`)."""
        self.__init__(definitions, specs, device)

    def compute(self, features: list[str], data: pa.Table) -> SliceResult:
        return compute_slice(self.runners, features, data)

    def close(self) -> None:
        pass


def holds_models(definitions: list[FeatureDefinition], specs: dict[str, UdfSpec]) -> bool:
    """Whether a stage's UDFs keep state a process should give back when the stage ends.

    Class UDFs load a model in ``setup()`` (memory, a GPU); row, batch and pandas
    functions hold nothing. Only a worker that held none is handed to the next stage.
    """
    import inspect

    return any(specs[d.name].form == "class" or inspect.isclass(specs[d.name].target) or d.engine == "gpu"
               for d in definitions)


def _send(stream: Any, obj: Any) -> None:
    import pickle

    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _recv(stream: Any) -> Any:
    import pickle

    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("worker stream closed")
    size = int.from_bytes(head, "little")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("worker stream closed mid-message")
    return pickle.loads(data)


def child_main() -> None:
    """Entry point of the worker process (``python -m omni_iceberg.backfill.worker_main``).

    Messages: ``("load", cloudpickled (definitions, specs, device))`` (answered once the
    runners exist), ``("compute", features, data)``, and ``None`` to end.
    """
    import os

    import cloudpickle

    # the protocol owns the real stdout; anything the UDFs print goes to stderr
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    proto_in = sys.stdin.buffer
    worker: InlineWorker | None = None
    while True:
        msg = _recv(proto_in)
        if msg is None:
            break
        try:
            if msg[0] == "load":
                definitions, specs, device = cloudpickle.loads(msg[1])
                worker = None  # the previous stage's runners go before the next ones are built
                worker = InlineWorker(definitions, specs, device)
                reply: Any = None
            else:
                _, features, data = msg
                reply = worker.compute(features, data)
            _send(proto_out, ("ok", reply))
        except BaseException as e:  # noqa: BLE001 - ship every failure back to the parent
            try:
                _send(proto_out, ("error", e))
            except Exception:  # noqa: BLE001 - unpicklable exception
                _send(proto_out, ("error", OmniError(f"{type(e).__name__}: {e}")))
    # Skip interpreter teardown (module and arrow finalisers: a few hundred ms the parent
    # would wait for). Nothing is left to flush but the standard streams; UDFs hold no
    # files across calls - results went back through the protocol.
    sys.stderr.flush()
    sys.stdout.flush()
    proto_out.flush()
    os._exit(0)


class ProcessWorker:
    """Runs a stage's UDFs in a child Python process that speaks length-prefixed pickles.

    A plain subprocess (not multiprocessing) so the caller's ``__main__`` is never
    re-imported in the child; UDFs travel by value with cloudpickle. The constructor
    does not wait for the child: it imports while the caller reads the first inputs,
    and :meth:`wait_ready` (or the first :meth:`compute`) waits for it.
    """

    def __init__(self, definitions: list[FeatureDefinition], specs: dict[str, UdfSpec], label: str,
                 device: str | None = None):
        import os
        import subprocess

        self.label = label
        self.features = [d.name for d in definitions]
        self.definitions = list(definitions)
        self.specs = specs
        #: the stage's planned device, sent with each load: a kept process may serve a stage of the other route
        self.device = device
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen([sys.executable, "-m", "omni_iceberg.backfill.worker_main"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._ready = False
        self._send_load()

    def _send_load(self) -> None:
        import cloudpickle

        payload = cloudpickle.dumps((self.definitions, self.specs, self.device))
        self._exchange(lambda: _send(self._proc.stdin, ("load", payload)), "starting", expect_reply=False)

    def load(self, definitions: list[FeatureDefinition], specs: dict[str, UdfSpec], label: str,
             device: str | None = None) -> None:
        """Hand this (running) process another stage's features: no new process, no new imports.

        Only for stages whose UDFs hold no model (:func:`holds_models`); the previous
        stage's runners are dropped in the child first.
        """
        self.wait_ready()
        self.label, self.features = label, [d.name for d in definitions]
        self.definitions, self.specs, self.device = list(definitions), specs, device
        self._ready = False
        self._send_load()

    def wait_ready(self) -> None:
        """Block until the child has imported and built the stage's runners (raises what it raised)."""
        if not self._ready:
            self._exchange(lambda: None, "starting")
            self._ready = True

    def compute(self, features: list[str], data: pa.Table) -> SliceResult:
        self.wait_ready()
        batch = data.column(BATCH_COLUMN)[0].as_py() if data.num_rows else "?"
        return self._exchange(lambda: _send(self._proc.stdin, ("compute", features, data)),
                              f"computing {data.num_rows} rows of batch {batch}")

    def _exchange(self, send: Any, doing: str, expect_reply: bool = True) -> Any:
        try:
            send()
            if not expect_reply:
                return None
            status, value = _recv(self._proc.stdout)
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:
            code = self._proc.wait(timeout=30)
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise WorkerCrashedError(
                f"the worker process for {self.label} (features {', '.join(self.features)}) died with {how} "
                f"while {doing}; nothing was committed and finished units are kept - fix the UDF, then rerun "
                f"the same command to resume", signal=-code if code is not None and code < 0 else None
            ) from e
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        try:
            _send(self._proc.stdin, None)
            self._proc.stdin.close()
        except Exception:  # noqa: BLE001
            pass
        try:
            self._proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self._proc.kill()
            self._proc.wait()
