"""Run one feature's UDF over a slice of rows, isolating the records it fails on.

Row UDFs are called per row inside a try. Arrow-batch, pandas (Series in, Series
out) and class UDFs are called on the whole slice; if the call raises, the slice is bisected until the failing records
are alone, so good neighbours keep their values (the paper's UDF-level isolation).
A wrong result shape or type is a bug in the definition, not in a record: it is
raised at once as :class:`FeatureDefinitionError` naming the feature.
"""

from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from catalog_ext.errors import ConfigError
# catalog_ext.types, not catalog_ext.physical: the worker process imports this module, and
# physical would pull in the family model and staging it never uses (slower worker start)
from catalog_ext.types import to_arrow as arrow_type
from omni_iceberg.features.placement import placed
from omni_iceberg.features.shared import SharedBatch
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError
from omni_iceberg.features.udf import UdfSpec


@dataclass(frozen=True)
class RecordFailure:
    row: int
    exception_class: str
    message: str
    traceback_digest: str


def _failure(row: int, error: BaseException) -> RecordFailure:
    # chain=False: bisection retries inside the except block, so the record's own failure carries
    # its batch's failures as context, as deep as the bisection went - which depends on how the
    # engine sliced the rows, not on the record. The digest names the record's failure only.
    tb = "".join(traceback.format_exception(type(error), error, error.__traceback__, chain=False))
    digest = hashlib.sha256(tb.encode()).hexdigest()[:16]
    return RecordFailure(row, type(error).__name__, str(error)[:1000], digest)


class FeatureRunner:
    """One feature in one worker: the UDF instance (set up once) and its output contract.

    ``device`` is where the plan placed the feature (``"cpu"``/``"cuda"``; None: no plan,
    the UDF decides): the UDF is set up and called inside
    :func:`~omni_iceberg.features.placement.placed`, so its model loader reads the plan's
    device instead of probing for a GPU.
    """

    def __init__(self, definition: FeatureDefinition, spec: UdfSpec, device: str | None = None):
        self.definition = definition
        self.spec = spec
        self.device = device
        self._fn: Any = None
        self._types = [arrow_type(o.type) for o in definition.outputs]
        if spec.form == "pandas":
            import importlib.util

            if importlib.util.find_spec("pandas") is None:  # else every record would "fail" on the import
                raise ConfigError(f"feature {definition.key} is a pandas UDF (form='pandas') and pandas is not "
                                  f"installed here: pip install 'omni-iceberg[spark]' (or pandas)")

    @property
    def fn(self) -> Any:
        if self._fn is None:
            with placed(self.device):  # class UDFs: constructor + setup() once per worker
                self._fn = self.spec.instantiate(self.device)
        return self._fn

    def run(self, columns: list[pa.Array], shared: SharedBatch | None) -> tuple[list[pa.Array], list[RecordFailure]]:
        """Outputs (one array per output column, null where failed) and the failed rows."""
        n = len(columns[0]) if columns else 0
        with placed(self.device):  # a model loaded lazily on the first call goes where the plan said too
            if self.spec.form == "row":
                values, failures = self._run_rows(columns, shared, n)
            else:
                values, failures = self._run_batch(columns, shared, list(range(n)))
        arrays = []
        for out, typ, vals in zip(self.definition.outputs, self._types, values):
            try:
                arrays.append(pa.array(vals, type=typ))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                sample = next((v for v in vals if v is not None), None)
                raise FeatureDefinitionError(
                    f"feature {self.definition.key}: output {out.name!r} must be {out.type}, "
                    f"the UDF returned {type(sample).__name__} {str(sample)[:40]!r} ({e})"
                ) from e
        return arrays, failures

    # ---- row form -------------------------------------------------------------------
    def _run_rows(self, columns, shared, n):
        params = self.definition.params
        pylists = [c.to_pylist() for c in columns]
        k = len(self.definition.outputs)
        out: list[list[Any]] = [[None] * n for _ in range(k)]
        failures = []
        for i in range(n):
            args = [col[i] for col in pylists]
            try:
                if self.spec.wants_shared:
                    result = self.fn(*args, **params, shared=shared.row(i) if shared else None)
                else:
                    result = self.fn(*args, **params)
            except Exception as e:  # noqa: BLE001 - user code: isolate the record
                failures.append(_failure(i, e))
                continue
            for j, v in enumerate(self._split_row(result)):
                out[j][i] = v
        return out, failures

    def _split_row(self, result: Any) -> list[Any]:
        outs = self.definition.outputs
        if len(outs) == 1:
            return [result]
        if isinstance(result, dict):
            return [result.get(o.name, result.get(o.name.rsplit(".", 1)[-1])) for o in outs]
        if isinstance(result, (tuple, list)) and len(result) == len(outs):
            return list(result)
        raise FeatureDefinitionError(
            f"feature {self.definition.key}: expected {len(outs)} values per row "
            f"({', '.join(o.name for o in outs)}), got {type(result).__name__}"
        )

    # ---- batch / class form ---------------------------------------------------------------
    def _run_batch(self, columns, shared, rows: list[int]):
        k = len(self.definition.outputs)
        n_total = len(columns[0]) if columns else 0
        out: list[list[Any]] = [[None] * n_total for _ in range(k)]
        failures: list[RecordFailure] = []
        size = max(1, self.definition.batch_size)
        if len(rows) <= size:
            self._bisect(columns, shared, rows, out, failures, whole=True)
        else:  # the definition's batch size, e.g. what fits a model on the device
            for start in range(0, len(rows), size):
                self._bisect(columns, shared, rows[start:start + size], out, failures)
        failures.sort(key=lambda f: f.row)
        return out, failures

    def _bisect(self, columns, shared, rows, out, failures, whole=False):
        if not rows:
            return
        if whole:
            args, sub_shared = columns, shared
        else:
            idx = pa.array(rows, pa.int64())
            args = [c.take(idx) for c in columns]
            sub_shared = SharedBatch({k: [v[i] for i in rows] for k, v in shared._columns.items()}) if shared else None
        if self.spec.form == "pandas":  # the pandas-UDF form: one pandas Series per input, as Spark passes them
            args = [a.to_pandas() for a in args]
        try:
            params = self.definition.params
            if self.spec.wants_shared:
                result = self.fn(*args, **params, shared=sub_shared)
            else:
                result = self.fn(*args, **params)
        except Exception as e:  # noqa: BLE001 - user code: find the bad records
            if len(rows) == 1:
                failures.append(_failure(rows[0], e))
                return
            mid = len(rows) // 2
            self._bisect(columns, shared, rows[:mid], out, failures)
            self._bisect(columns, shared, rows[mid:], out, failures)
            return
        for j, vals in enumerate(self._split_batch(result, len(rows))):
            for r, v in zip(rows, vals):
                out[j][r] = v

    def _split_batch(self, result: Any, n: int) -> list[list[Any]]:
        outs = self.definition.outputs
        if self.spec.form == "pandas" and hasattr(result, "columns") and hasattr(result, "iloc"):
            result = {str(c): result[c] for c in result.columns}  # a DataFrame: one column per output
        if isinstance(result, dict):
            parts = [result.get(o.name, result.get(o.name.rsplit(".", 1)[-1])) for o in outs]
        elif len(outs) == 1:
            parts = [result]
        elif isinstance(result, (tuple, list)) and len(result) == len(outs):
            parts = list(result)
        else:
            raise FeatureDefinitionError(
                f"feature {self.definition.key}: expected {len(outs)} output arrays, got {type(result).__name__}")
        lists = []
        for o, part in zip(outs, parts):
            if part is None:
                raise FeatureDefinitionError(f"feature {self.definition.key}: no values returned for {o.name!r}")
            if self.spec.form == "pandas" and hasattr(part, "iloc"):
                # as Spark reads a pandas UDF's result: NaN and None are both null
                part = pa.Array.from_pandas(part)
            vals = part.to_pylist() if hasattr(part, "to_pylist") else list(part.tolist() if hasattr(part, "tolist") else part)
            if len(vals) != n:
                raise FeatureDefinitionError(
                    f"feature {self.definition.key}: returned {len(vals)} values for {o.name!r} on a batch of {n} rows")
            lists.append(vals)
        return lists
