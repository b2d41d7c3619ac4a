"""The ``omni`` command. Every command takes ``--json`` for machine-readable output.

Exit codes: 0 ok; 1 another omni error; 2 bad input (path, name, schema, query, version);
3 commit conflict; 4 too many rejected records; 5 a worker process died; 70 an
unexpected failure, which is a bug in omni (``--debug`` or ``OMNI_DEBUG=1`` shows the
traceback); 130 interrupted; 141 the output pipe was closed (``omni sql ... | head``).
Errors are one line on stderr (plus a JSON object on stdout with ``--json``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from catalog_ext.errors import OmniError

#: the exit code of an exception that is not an OmniError: EX_SOFTWARE, "internal software error"
BUG_EXIT_CODE = 70


def _debug_setting() -> bool:
    """``OMNI_DEBUG``; a malformed value must not hide the error being reported, so it reads as on."""
    from catalog_ext import settings
    from catalog_ext.errors import ConfigError

    try:
        return bool(settings.value("OMNI_DEBUG"))
    except ConfigError:
        return True


def main(argv: list[str] | None = None) -> int:
    from omni_iceberg.cli.parser import build_parser

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    debug = args.debug or _debug_setting()
    if args.json or getattr(args, "no_progress", False):
        from omni_iceberg.ui.progress import silence_library_progress

        silence_library_progress()
    try:
        result = _run(args, argv)
        sys.stdout.flush()  # a closed pipe shows up here, inside the handler below
    except BrokenPipeError:
        return _broken_pipe()
    except OmniError as e:
        return _fail(args, str(e), type(e).__name__, e.exit_code)
    except KeyboardInterrupt:
        print("omni: interrupted; nothing was committed by the interrupted step", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - anything that is not an OmniError is a bug: say so
        code = _fail(args, f"{type(e).__name__}: {e} - this is a bug in omni; "
                           f"{'the traceback follows' if debug else 'rerun with --debug (or OMNI_DEBUG=1) for the traceback'}"
                           f", and please report it", type(e).__name__, BUG_EXIT_CODE)
        if debug:
            import traceback

            traceback.print_exc()
        return code
    return result if isinstance(result, int) else 0


def _run(args: Any, argv: list[str]) -> Any:
    from catalog_ext.redact import redact_command
    from omni_iceberg.cli.commands import dispatch

    # the command line is stored in the catalog (omni log, view metadata): never with credentials
    return dispatch(args, redact_command(argv))


def _fail(args: Any, message: str, kind: str, code: int) -> int:
    from catalog_ext.redact import redact

    message = redact(message)
    try:
        if getattr(args, "json", False):
            from omni_iceberg.ui.formatting import dumps

            print(dumps({"error": message, "type": kind, "exit_code": code}))
        print(f"omni: error: {message}", file=sys.stderr)
    except BrokenPipeError:
        _broken_pipe()
    return code


def _broken_pipe() -> int:
    """The reader went away (``omni sql ... | head``): stop quietly, as ``cat`` would.

    Python would print a BrokenPipeError traceback while flushing stdout at exit;
    pointing stdout at /dev/null first makes that flush a no-op.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe


__all__ = ["main", "BUG_EXIT_CODE"]
