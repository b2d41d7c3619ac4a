"""Definitions from YAML/JSON mappings: the paper's field names, short forms, and built-ins by name.

Kept apart from :mod:`omni_iceberg.features.spec` (the frozen record) because completing an
entry such as ``{udf: detected_lang}`` needs the UDF registry, which itself builds specs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from catalog_ext.errors import SourceError

from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError
from omni_iceberg.features.udf import fill_from_udf, load_python_features


def load_definition(data: dict[str, Any], source: str = "<dict>") -> FeatureDefinition:
    """Validate a mapping (from YAML/JSON) into a definition, with the file named in errors."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise FeatureDefinitionError(f"{source}: expected a mapping (name:, udf:, inputs:, outputs: ...), "
                                     f"got {type(data).__name__} {data!r:.60}")
    data = dict(data)
    outs = data.get("outputs")
    if isinstance(outs, dict):  # short form: {name: type}
        data["outputs"] = [{"name": k, "type": t} for k, t in outs.items()]
    for old, new in (("inputColumns", "inputs"), ("outputColumns", "outputs"), ("computeEngine", "engine"),
                     ("defaultFeatExpression", "udf"), ("tablePath", "table")):
        if old in data and new not in data:
            data[new] = data.pop(old)
    data = fill_from_udf(data, source)
    try:
        return FeatureDefinition.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise FeatureDefinitionError(f"{source}: field '{where}': {first['msg']}") from e


def load_definitions_file(path: str) -> list[FeatureDefinition]:
    """A YAML or JSON file with one definition or a list (``features: [...]`` also accepted)."""
    p = Path(path)
    if not p.exists():
        raise SourceError(f"feature definition file not found: {path}")
    if p.suffix == ".py":
        return load_python_features(path)
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error is the file's fault
        raise FeatureDefinitionError(f"{path}: cannot parse: {e}") from e
    if isinstance(data, dict) and "features" in data:
        data = data["features"]
    items = data if isinstance(data, list) else [data]
    return [load_definition(item, f"{path}[{i}]") for i, item in enumerate(items)]
