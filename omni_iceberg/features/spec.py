"""The feature definition: a frozen, canonically serialisable asset.

Field names follow the paper's FeatureDefinition (inputColumns, outputColumns,
defaultFeatExpression, computeEngine, ...), in Python spelling. ``version`` is either
given explicitly or derived from the UDF's code hash plus the parameters and
columns - never random - so the same definition always gets the same version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from catalog_ext.contract import STAGES, check_identifier
from catalog_ext import types
from catalog_ext.errors import OmniError


class FeatureDefinitionError(OmniError):
    """A feature definition is invalid; raised at registration, before any work starts."""

    exit_code = 2


class OutputColumn(BaseModel):
    """One column a feature produces: a feature column, or a stage field like ``ProcessedData.parsed_text``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    type: str = "double"
    analysis_type: str = ""  # e.g. "score", "label", "count": how analysts should aggregate it
    comment: str = ""

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if not types.is_valid(v):
            raise ValueError(f"unsupported output type {v!r} (use one of {sorted(types.PRIMITIVE_TYPES)} or list<...>)")
        return types.format_type(types.parse(v))

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        parts = v.split(".")
        if len(parts) == 2 and parts[0] in STAGES:
            check_identifier(parts[1], "stage field name")
        elif len(parts) == 1:
            check_identifier(v, "output column name")
        else:
            raise ValueError(f"output {v!r}: use a column name or STAGE.field with STAGE in {STAGES}")
        return v


class UdfSource(BaseModel):
    """Where a UDF declared in a user's .py file lives, so another process can load it again."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    path: str  # absolute path of the .py file at registration
    module: str  # the module name it was imported as
    code_hash: str  # the UDF's code hash at registration: a changed file is detected, not run


class FeatureDefinition(BaseModel):
    """What a feature is. How it is computed is the registered UDF it names."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[OutputColumn, ...]
    udf: str
    params: dict[str, Any] = Field(default_factory=dict)
    engine: Literal["cpu", "gpu", "auto"] = "cpu"
    version: str = ""
    table: str | None = None
    batch_size: int = 1024
    memory_mb: int | None = None
    parallelism: int = 1
    model_size_mb: float = 0.0
    filter: str | None = None
    comment: str = ""
    source: UdfSource | None = None  # set for UDFs from a user's .py file; not part of the version

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        check_identifier(v, "feature name")
        return v

    @field_validator("outputs")
    @classmethod
    def _some_outputs(cls, v: tuple[OutputColumn, ...]) -> tuple[OutputColumn, ...]:
        if not v:
            raise ValueError("a feature needs at least one output column")
        names = [o.name for o in v]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate output columns {names}")
        return v

    def canonical_json(self) -> str:
        # without a source the JSON is what it was before sources existed: stored definitions still match
        dumped = self.model_dump(mode="json", exclude={"source"} if self.source is None else None)
        return json.dumps(dumped, sort_keys=True, separators=(",", ":"))

    def identity_json(self) -> str:
        """The canonical JSON without ``source``: what must match for a re-registration to be the same.

        Where the file lived is not part of the feature (the code hash identifies the code):
        the same feature registered again from a moved .py file is the same feature.
        """
        return same_identity_json(self.canonical_json())

    def with_version(self, code_hash: str) -> "FeatureDefinition":
        """Fill in ``version`` from the code hash and everything that changes results."""
        if self.version:
            return self
        payload = json.dumps(
            {"code": code_hash, "udf": self.udf, "params": self.params, "inputs": list(self.inputs),
             "outputs": [o.model_dump() for o in self.outputs], "filter": self.filter},
            sort_keys=True, default=str,
        )
        return self.model_copy(update={"version": "h" + hashlib.sha256(payload.encode()).hexdigest()[:12]})

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    @property
    def key(self) -> str:
        """``name@version``: the identity of the values this feature produces."""
        return f"{self.name}@{self.version}"


def same_identity_json(definition_json: str) -> str:
    """:meth:`FeatureDefinition.identity_json` of a stored definition (canonical JSON text)."""
    data = json.loads(definition_json)
    data.pop("source", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))
