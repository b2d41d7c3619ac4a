"""Declaring UDFs in Python: row functions, Arrow-batch functions, classes with setup.

    @feature(outputs={"text_length": "long"})
    def text_length(parsed_text):            # input inferred from the parameter name
        return len(parsed_text)

    @feature(outputs={"n_words": "long"}, form="pandas")   # a Spark-style pandas UDF
    def n_words(parsed_text):                 # a pandas Series in, a Series out
        return parsed_text.str.split().str.len()

    @feature(outputs={"quality_score": "double"}, form="batch", engine="auto", model_size_mb=90)
    class QualityScore:
        def setup(self, device): self.model = load().to(device)  # once per worker, where the plan placed it
        def __call__(self, parsed_text): return self.model.score(parsed_text.to_pylist())

A decorated function is returned unchanged (with ``.definition`` attached), so calling
it with plain values runs it directly - unit tests need no engine. Parameters with a
default are configuration (filled from ``FeatureDefinition.params``); the others are
inputs. A parameter named ``shared`` receives the per-batch :class:`SharedBatch`,
through which features fused into one stage share intermediate results.

What a UDF's code hash (and so a derived version) covers - :func:`udf_code_hash`:

- a UDF in a user's file: the function's source, the whole file it is defined in
  (module-level constants, regexes, helpers) and every local module that file imports,
  directly or through another local module - a file outside the Python installation's
  standard library and site-packages, and outside omni's own packages. Editing any of
  them is new code: a new derived version, and ``omni backfill`` in a fresh process
  refuses to run the old registration with it. Two features of one file change version
  together; a comment edit in that file is a change too;
- a UDF in an installed package or in omni's library: the function's own source only.
  Built-ins name the module-level things they use (``builtin(depends=...)``), so an
  edit elsewhere in the library keeps their versions; an installed package's UDFs should
  carry an explicit version.

An explicit ``version=`` is kept as given; its code is still compared with the code
registered under it, and different code under the same version is refused.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError, OutputColumn

Form = Literal["row", "batch", "class", "pandas"]
SHARED_PARAM = "shared"

_UDFS: dict[str, "UdfSpec"] = {}
#: imports omni's built-in UDFs, which registers them, for a lookup that misses. Set by the
#: features package (``omni_iceberg/features/__init__.py``): the library is built on this
#: module, so this module never imports it
_builtin_loader: Callable[[], None] | None = None


@dataclass(frozen=True)
class UdfSpec:
    """A registered UDF: how to call it, and the hash of its code."""

    name: str
    form: Form
    target: Any  # function, or class for form "class"
    input_params: tuple[str, ...]
    config_params: tuple[str, ...]
    wants_shared: bool
    code_hash: str  # udf_code_hash: what the UDF's result depends on (see the module docstring)
    definition: FeatureDefinition | None = field(default=None, compare=False)
    #: the function's own source hash: what code_hash was before it covered the module, so a
    #: feature registered then is still recognised as the same code
    function_hash: str = field(default="", compare=False)

    def same_code(self, registered_hash: str) -> bool:
        """Whether a code hash recorded at registration is this UDF's code."""
        return registered_hash in (self.code_hash, self.function_hash or self.code_hash)

    def instantiate(self, device: str | None = None) -> Callable[..., Any]:
        """A callable for one worker: classes are built and set up once here.

        ``device`` is where the plan placed the feature (``"cpu"``/``"cuda"``, see
        :mod:`omni_iceberg.features.placement`): a ``setup`` with a ``device`` parameter
        receives it, so a model is loaded where the router said, not where the UDF guesses.
        """
        if self.form != "class":
            return self.target
        obj = self.target()
        setup = getattr(obj, "setup", None)
        if setup is not None:
            if device is not None and _takes_device(setup):
                setup(device=device)
            else:
                setup()
        return obj


def _takes_device(setup: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(setup).parameters
    except (TypeError, ValueError):  # a builtin or C-level callable: no signature to read
        return False
    return "device" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def code_hash(target: Any) -> str:
    """Hash of the function's (or class's) own source code, falling back to bytecode."""
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        text = repr(code.co_code if code else target.__qualname__)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def udf_code_hash(target: Any) -> str:
    """The code hash a UDF is registered and versioned with (see the module docstring)."""
    own = code_hash(target)
    module = module_hash(target)
    return own if not module else hashlib.sha256(f"{own}:{module}".encode()).hexdigest()[:16]


#: omni's own packages, siblings in one distribution: their UDFs are library code
_OMNI_ROOT = Path(__file__).resolve().parents[2]
_OMNI_PACKAGES = ("omni_iceberg", "catalog_ext", "governance", "spark_udfs")


def module_hash(target: Any) -> str:
    """Hash of the file defining ``target`` and of the local modules it imports; "" when
    ``target`` is not user code (an installed package, omni's library, no file)."""
    try:
        source = inspect.getsourcefile(target)
    except TypeError:
        return ""
    if not source or not _is_local(Path(source)):
        return ""
    package = getattr(inspect.getmodule(target), "__package__", None) or ""
    digest = hashlib.sha256()
    # the defining file under no name (where it lives is not part of the code); imports by module name
    for name, path in sorted(_local_closure(Path(source), package).items()):
        digest.update(f"{name}\0".encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[Path, ...]:
    import site
    import sysconfig

    roots = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # some embedded interpreters' site module lacks it
        pass
    roots.add(site.getusersitepackages())
    roots.update(str(_OMNI_ROOT / name) for name in _OMNI_PACKAGES)
    return tuple(Path(r).resolve() for r in roots if r)


def _is_local(path: Path) -> bool:
    """A readable .py file outside the standard library, site-packages and omni's own packages."""
    if path.suffix != ".py" or not path.is_file():
        return False
    resolved = path.resolve()
    return not any(resolved.is_relative_to(root) for root in _installed_roots())


def _local_closure(root: Path, package: str) -> dict[str, Path]:
    """``{"": root}`` plus every local module ``root`` imports, transitively, by module name."""
    found: dict[str, Path] = {"": root}
    todo = [(root, package)]
    while todo:
        path, pkg = todo.pop()
        for name in _imported_names(path, pkg):
            if name in found:
                continue
            file = _module_file(name)
            if file is not None and _is_local(file):
                found[name] = file
                todo.append((file, name if file.name == "__init__.py" else name.rpartition(".")[0]))
    return found


def _imported_names(path: Path, package: str) -> list[str]:
    """Absolute names of the modules ``path`` imports anywhere in it (lazy imports in functions too),
    with their parent packages (importing ``a.b`` runs ``a/__init__.py``)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts) or not parts:
                    continue  # a relative import outside any package: it cannot have run
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            if base:
                names.append(base)
            names += [f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*"]
    out: list[str] = []
    for name in names:
        parts = name.split(".")
        out += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return list(dict.fromkeys(out))


def _module_file(name: str) -> Path | None:
    """The file module ``name`` is (or would be) loaded from, without importing anything."""
    module = sys.modules.get(name)
    if module is not None:
        file = getattr(module, "__file__", None)
        return Path(file) if file else None
    from importlib.machinery import PathFinder

    search: list[str] | None = None
    spec = None
    for i, part in enumerate(name.split(".")):
        parent = sys.modules.get(".".join(name.split(".")[:i])) if i else None
        if parent is not None:
            search = list(getattr(parent, "__path__", []) or [])
        try:
            spec = PathFinder.find_spec(part, search)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin not in ("built-in", "frozen") else None


def _signature(target: Any, form: Form) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    fn = target.__call__ if form == "class" else target
    params = list(inspect.signature(fn).parameters.values())
    if form == "class":
        params = params[1:] if params and params[0].name == "self" else params
    inputs, config, shared = [], [], False
    for p in params:
        if p.name == SHARED_PARAM:
            shared = True
        elif p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        elif p.default is inspect.Parameter.empty:
            inputs.append(p.name)
        else:
            config.append(p.name)
    return tuple(inputs), tuple(config), shared


def register_udf(name: str, target: Any, form: Form | None = None, definition: FeatureDefinition | None = None,
                 replace: bool = True) -> UdfSpec:
    form = form or ("class" if inspect.isclass(target) else "row")
    inputs, config, shared = _signature(target, form)
    if form == "pandas" and (shared or inspect.isclass(target)):
        # Spark calls each pandas UDF on its own: there is no batch shared with other features
        raise FeatureDefinitionError(
            f"UDF {name!r}: form='pandas' takes a function of pandas Series (Series in, Series out), "
            f"without a {SHARED_PARAM!r} parameter; use form='batch' or form='class' for those")
    spec = UdfSpec(name, form, target, inputs, config, shared, udf_code_hash(target), definition,
                   function_hash=code_hash(target))
    existing = _UDFS.get(name)
    if existing is not None and not replace and existing.code_hash != spec.code_hash:
        raise FeatureDefinitionError(f"UDF {name!r} is already registered with different code")
    _UDFS[name] = spec
    return spec


def udf(name: str | None = None, *, form: Form | None = None) -> Callable[[Any], Any]:
    """Register a UDF by name (for YAML definitions that reference it)."""

    def wrap(target: Any) -> Any:
        spec = register_udf(name or target.__name__, target, form)
        target.udf_spec = spec
        return target

    return wrap


def feature(
    outputs: dict[str, str] | list[OutputColumn] | list[dict[str, str]],
    *,
    name: str | None = None,
    inputs: list[str] | None = None,
    form: Form | None = None,
    engine: str = "cpu",
    version: str = "",
    params: dict[str, Any] | None = None,
    batch_size: int = 1024,
    model_size_mb: float = 0.0,
    filter: str | None = None,  # noqa: A002 - the paper's field name
    table: str | None = None,
    comment: str = "",
) -> Callable[[Any], Any]:
    """Declare a feature from a function or class; see the module docstring."""

    def wrap(target: Any) -> Any:
        fname = name or _snake(target.__name__)
        if isinstance(outputs, dict):
            outs = tuple(OutputColumn(name=k, type=v) for k, v in outputs.items())
        else:
            outs = tuple(o if isinstance(o, OutputColumn) else OutputColumn(**o) for o in outputs)
        f = form or ("class" if inspect.isclass(target) else "row")
        ins, _, _ = _signature(target, f)
        definition = FeatureDefinition(
            name=fname, inputs=tuple(inputs or ins), outputs=outs, udf=fname, params=dict(params or {}),
            engine=engine, version=version, batch_size=batch_size, model_size_mb=model_size_mb, filter=filter,
            table=table, comment=comment or (inspect.getdoc(target) or "").split("\n")[0],
        )
        spec = register_udf(fname, target, f, definition)
        target.definition = definition.with_version(spec.code_hash)
        target.udf_spec = spec
        return target

    return wrap


def _snake(name: str) -> str:
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def get_udf(name: str) -> UdfSpec:
    """A registered UDF by name; ``package.module:function`` imports user code on demand."""
    if name not in _UDFS and ":" in name:
        _import_udf(name)
    if name not in _UDFS:
        _load_builtins()
    try:
        return _UDFS[name]
    except KeyError:
        from catalog_ext.suggest import did_you_mean

        raise FeatureDefinitionError(
            f"no UDF named {name!r} is registered{did_you_mean(name, _UDFS)}; built-ins are listed by "
            f"'omni feature udfs', and UDFs of a .py file are loaded by 'omni feature register FILE.py'"
        ) from None


def _import_udf(ref: str) -> None:
    import importlib

    module_name, _, attr = ref.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise FeatureDefinitionError(f"cannot import UDF {ref!r}: {e}") from e
    spec = getattr(target, "udf_spec", None)
    register_udf(ref, spec.target if spec else target, spec.form if spec else None)


_USER_MODULES: dict[str, Any] = {}


def _user_module_name(path: "Path") -> str:
    """A stable module name per file: the stem for humans, a path digest so two ``f.py`` never clash."""
    import re

    stem = re.sub(r"\W", "_", path.stem)
    return f"omni_user_features_{stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"


def _exec_user_module(path: "Path", name: str, shown: str) -> Any:
    """Import the user's file as module ``name`` and make its code travel by value.

    Worker processes (and Spark executors) cannot import ``name``: it exists only in
    this process. Registering the module with cloudpickle as pickle-by-value ships
    its functions and classes themselves instead of a reference to the module.
    """
    import importlib.util

    import cloudpickle

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FeatureDefinitionError(f"{shown}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's module failed to import
        del sys.modules[name]
        raise FeatureDefinitionError(f"{shown}: import failed: {type(e).__name__}: {e}") from e
    cloudpickle.register_pickle_by_value(module)
    _USER_MODULES[name] = module
    return module


def _forget_module(name: str) -> None:
    """Unload a user's module and the UDFs it declared, so the next use imports the file again."""
    module = _USER_MODULES.pop(name, None)
    sys.modules.pop(name, None)
    for key, spec in list(_UDFS.items()):
        if getattr(spec.target, "__module__", None) == name:
            del _UDFS[key]
    if module is not None:
        import cloudpickle

        cloudpickle.unregister_pickle_by_value(module)


def user_modules() -> list[Any]:
    """Modules loaded from users' .py files in this process.

    An engine that pickles with its own copy of cloudpickle (PySpark vendors one) must
    register these as pickle-by-value too, or its workers cannot unpickle the UDFs.
    """
    return list(_USER_MODULES.values())


def load_python_features(path: str) -> list[FeatureDefinition]:
    """Import a .py file and return the definitions of every ``@feature`` in it.

    Each definition records where its UDF came from (:class:`UdfSource`: file, module,
    code hash), so a later process - ``omni backfill`` after ``omni feature register
    f.py`` - can load the same code again (:func:`load_udf_sources`).
    """
    from pathlib import Path

    from omni_iceberg.features.spec import UdfSource

    p = Path(path).resolve()
    name = _user_module_name(p)
    module = _exec_user_module(p, name, path)
    found = []
    for value in vars(module).values():
        d = getattr(value, "definition", None)
        if isinstance(d, FeatureDefinition) and getattr(value, "__module__", "") == name:
            spec = value.udf_spec
            found.append(d.model_copy(update={"source": UdfSource(path=str(p), module=name, code_hash=spec.code_hash)}))
    if not found:
        raise FeatureDefinitionError(f"{path}: no @feature definitions found (decorate functions or classes "
                                     f"with @feature from omni_iceberg.features)")
    return found


def load_udf_sources(definitions: list[FeatureDefinition]) -> None:
    """Make every definition's UDF callable in this process, loading user files where recorded.

    A UDF already registered here is left alone; one declared in a user's .py file is
    imported from the path recorded at registration, and its code must still hash to
    what was registered - otherwise the values would be computed by different code
    under the old version.
    """
    from pathlib import Path

    for d in definitions:
        src = getattr(d, "source", None)
        if src is None or d.udf in _UDFS:
            continue
        p = Path(src.path)
        if not p.is_file():
            raise FeatureDefinitionError(
                f"feature {d.key}: its UDF {d.udf!r} was registered from {src.path}, which no longer exists; "
                f"restore the file, or register the feature again from its new place "
                f"('omni feature register NEW_PATH.py')"
            )
        if src.module not in sys.modules:
            _exec_user_module(p, src.module, src.path)
        spec = _UDFS.get(d.udf)
        if spec is None:
            raise FeatureDefinitionError(
                f"feature {d.key}: {src.path} no longer declares a UDF named {d.udf!r}; restore it or "
                f"register the file again")
        if spec.code_hash != src.code_hash and spec.same_code(src.code_hash):
            print(f"warning: feature {d.key} was registered before its version covered the rest of "
                  f"{src.path} and the local modules it imports: edits there are not detected until it is "
                  f"registered again ('omni feature register {src.path}')", file=sys.stderr)
        elif spec.code_hash != src.code_hash:
            # the new code must not stay callable under this name: a second call (a plan, then
            # a backfill in one process) would find it loaded and run it under the old version
            _forget_module(src.module)
            raise FeatureDefinitionError(
                f"feature {d.key}: the code of {d.udf!r} in {src.path} changed since it was registered "
                f"(code hash {src.code_hash}, now {spec.code_hash}); run 'omni feature register {src.path}' "
                f"to register the new code as a new version, then backfill that"
            )


def fill_from_udf(data: dict[str, Any], source: str = "<dict>") -> dict[str, Any]:
    """Complete a YAML/JSON entry that names a ``@feature`` UDF from that UDF's own declaration.

    ``{udf: detected_lang}`` (or ``{name: detected_lang}``) registers the built-in with
    its inputs, outputs, engine and batch size; fields given in the entry win. The
    declared version is kept only while nothing that changes the values (inputs,
    outputs, params, filter) is overridden - otherwise it is derived again.
    """
    udf_name = data.get("udf") or (data.get("name") if "inputs" not in data else None)
    if not udf_name or not isinstance(udf_name, str):
        return data
    try:
        spec = get_udf(udf_name)
    except FeatureDefinitionError as e:
        if "inputs" in data and "outputs" in data:
            return data  # complete already; registration reports an unknown UDF with its context
        raise FeatureDefinitionError(f"{source}: {e}") from None
    declared = spec.definition
    if declared is None:
        return data
    base = declared.model_dump(mode="json", exclude={"table", "source"})
    out = dict(data)
    out.setdefault("udf", spec.name)
    def same(key: str) -> bool:
        mine, theirs = data[key], base.get(key)
        if key == "outputs":  # short and long forms: compare what decides the values
            mine = [(o.get("name"), o.get("type", "double")) if isinstance(o, dict) else o for o in mine or ()]
            theirs = [(o["name"], o["type"]) for o in theirs]
        if key == "inputs":
            mine, theirs = list(mine or ()), list(theirs)
        return mine == theirs

    changed = any(k in data and not same(k) for k in ("inputs", "outputs", "params", "filter"))
    for key, value in base.items():
        if key == "version" and changed:
            continue
        out.setdefault(key, value)
    return out


def list_udfs() -> list[UdfSpec]:
    _load_builtins()
    return sorted(_UDFS.values(), key=lambda s: s.name)


def set_builtin_loader(load: Callable[[], None]) -> None:
    """``load()`` imports the built-in UDFs; :func:`get_udf` and :func:`list_udfs` call it on a miss."""
    global _builtin_loader
    _builtin_loader = load


def _load_builtins() -> None:
    if _builtin_loader is not None:
        _builtin_loader()
