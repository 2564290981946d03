"""JSON log lines on stdout: one object per line (python-json-logger, configured, not hand-written).

Every line carries `timestamp` (UTC, ISO 8601), `severity` (the Python level name, which log
collectors such as Cloud Logging and Loki read as is), `logger` and `message`, plus the record's
extras (`runtime` on Baton's per-runtime records). kopf's per-object records carry their object
reference as a JSON object under `object` (kopf's own JSON key); the OperatorSettings kopf puts on
them, and its internal flags, are left out.
"""

from __future__ import annotations

import logging
import sys
import threading
import types
from typing import TextIO

from pythonjsonlogger import core as pjl_core, json as pjl_json

# kopf's ObjectLogger adds these to every per-object record: `settings` is the whole
# OperatorSettings (not a log field), `k8s_skip` an internal posting flag.
_KOPF_INTERNAL = ("settings", "k8s_skip")
REFKEY = "object"


def formatter() -> logging.Formatter:
    return pjl_json.JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "severity", "name": "logger", "k8s_ref": REFKEY, "exc_info": "exception"},
        reserved_attrs=[*pjl_core.RESERVED_ATTRS, *_KOPF_INTERNAL],
        timestamp=True,
        # Messages such as "g1 → g2" read as written, not as \u2192 (JSON is UTF-8 anyway).
        json_ensure_ascii=False,
    )


def fatal(message: str, *, stream: TextIO | None = None, **fields: object) -> None:
    """One CRITICAL JSON line on stderr (by default), for what ends the process before or instead
    of its work: a bad setting, a failed startup. No traceback: the message says what to fix."""
    record = logging.LogRecord("baton", logging.CRITICAL, __file__, 0, message, None, None)
    record.__dict__.update(fields)
    out = sys.stderr if stream is None else stream
    out.write(formatter().format(record) + "\n")
    out.flush()


def _log_uncaught(exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
    # A crash before or outside kopf (bad kubeconfig, a bug at import) is a JSON line too.
    logging.getLogger("baton").critical("uncaught exception: %s", exc, exc_info=(exc_type, exc, tb))


def _log_uncaught_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None:
        return
    logging.getLogger("baton").critical(
        "uncaught exception in thread %s: %s", getattr(args.thread, "name", "?"), args.exc_value,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def configure(level: str, *, stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(sys.stdout if stream is None else stream)
    handler.setFormatter(formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Python warnings (urllib3's, deprecations) would otherwise print plain text on stderr.
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_thread
    # kopf is chatty about every watch event at INFO: keep its warnings, unless asked for DEBUG.
    logging.getLogger("kopf").setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
