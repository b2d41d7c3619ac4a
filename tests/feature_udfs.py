"""Small deterministic UDFs for engine tests (the real built-ins are tested on their own).

They mirror the paper's chain - parse HTML, detect language, score math - with plain
code, so planner and engine tests are fast and exact.
"""

import os
import re

from omni_iceberg.features import feature

MATH = re.compile(r"\b(math|sqrt|sin|cos|log|exp|integer|float|complex|pi)\b", re.I)


@feature(outputs={"ProcessedData.parsed_text": "string"}, inputs=["RawData.raw_data"], name="t_parse", form="batch")
def t_parse(raw_data):
    from selectolax.lexbor import LexborHTMLParser

    return [LexborHTMLParser(x).body.text(separator=" ") if x else None for x in raw_data.to_pylist()]


@feature(outputs={"t_lang": "string"}, inputs=["ProcessedData.parsed_text"])
def t_lang(parsed_text):
    return "en" if " the " in parsed_text else "xx"


@feature(outputs={"t_math": "double"}, inputs=["ProcessedData.parsed_text", "t_lang"])
def t_math(parsed_text, t_lang):
    if t_lang != "en":
        return None
    return len(MATH.findall(parsed_text)) / max(1, len(parsed_text.split()))


@feature(outputs={"t_len": "long"}, inputs=["ProcessedData.parsed_text"])
def t_len(parsed_text, shared=None):
    return len(shared.words("ProcessedData.parsed_text"))


@feature(outputs={"t_digits": "double"}, inputs=["ProcessedData.parsed_text"])
def t_digits(parsed_text):
    return sum(c.isdigit() for c in parsed_text) / max(1, len(parsed_text))


@feature(outputs={"t_fragile": "long"}, inputs=["RawData.raw_data"], form="batch", batch_size=64)
def t_fragile(raw_data):
    """Raises for the whole batch when any record contains the marker: bisection must find it."""
    values = raw_data.to_pylist()
    if any("POISON" in v for v in values):
        raise ValueError("poisoned record in batch")
    return [len(v) for v in values]


@feature(outputs={"t_die": "long"}, inputs=["RawData.raw_data"])
def t_die(raw_data):
    """Kills its process on a marked record while the marker file exists (a crash mid-run)."""
    marker = os.environ.get("OMNI_TEST_DIE_MARKER", "")
    if marker and os.path.exists(marker) and "DIE" in raw_data:
        os._exit(13)
    return len(raw_data)


@feature(outputs={"t_segv": "long"}, inputs=["RawData.raw_data"])
def t_segv(raw_data):
    import ctypes

    if "SEGV" in raw_data:
        ctypes.string_at(0)  # dereference NULL: a real segmentation fault
    return 1


@feature(outputs={"t_badtype": "double"}, inputs=["RawData.raw_data"])
def t_badtype(raw_data):
    return "not a number"


@feature(outputs={"t_badlen": "long"}, inputs=["RawData.raw_data"], form="batch")
def t_badlen(raw_data):
    return [1]


@feature(outputs={"t_flaky": "long"}, inputs=["RawData.raw_data"], form="batch", batch_size=16)
def t_flaky(raw_data):
    """Fails on marked records while the marker file exists: a transient, retryable error."""
    values = raw_data.to_pylist()
    marker = os.environ.get("OMNI_TEST_FLAKY_MARKER", "")
    if marker and os.path.exists(marker) and any("POISON" in v for v in values):
        raise TimeoutError("model server busy")
    return [len(v) for v in values]


@feature(outputs={"t_hungry": "long"}, inputs=["RawData.raw_data"], form="batch", batch_size=64)
def t_hungry(raw_data):
    """Needs memory in proportion to its batch: past 16 rows it is killed with SIGKILL, as the
    kernel's out-of-memory killer (or a container's memory limit) would kill it."""
    import signal

    if len(raw_data) > 16:
        os.kill(os.getpid(), signal.SIGKILL)
    return [len(v) for v in raw_data.to_pylist()]
