"""Log shape: one JSON object a line, with severity, message, timestamp and logger; kopf's
per-object records carry their reference as an object and never their settings."""
from __future__ import annotations

import datetime
import io
import json
import logging
import sys
import threading
import warnings
from typing import Any, Iterator

import kopf
import pytest

from baton import logs


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """logs.configure() into a buffer; the global logging state is put back afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("kopf").level, sys.excepthook, threading.excepthook)
    buf = io.StringIO()
    logs.configure("DEBUG", stream=buf)
    try:
        yield buf
    finally:
        logging.captureWarnings(False)
        root.handlers[:], root.level = saved[0], saved[1]
        logging.getLogger("kopf").setLevel(saved[2])
        sys.excepthook, threading.excepthook = saved[3], saved[4]


def _lines(buf: io.StringIO) -> list[dict[str, Any]]:
    out = []
    for line in buf.getvalue().splitlines():
        record = json.loads(line)
        assert isinstance(record, dict), line
        out.append(record)
    return out


def _assert_common(record: dict[str, Any]) -> None:
    assert record["severity"] in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, record
    assert isinstance(record["message"], str) and record["message"], record
    assert isinstance(record["logger"], str) and record["logger"], record
    ts = datetime.datetime.fromisoformat(record["timestamp"])
    assert ts.utcoffset() == datetime.timedelta(0), record


def test_baton_record_has_the_fields_and_its_extras(captured: io.StringIO) -> None:
    logging.getLogger("baton.runner").warning("observing %s failed", "a/b", extra={"runtime": "agents/search"})
    [record] = _lines(captured)
    _assert_common(record)
    assert record["severity"] == "WARNING"
    assert record["logger"] == "baton.runner"
    assert record["message"] == "observing a/b failed"
    assert record["runtime"] == "agents/search"


def test_kopf_object_record_has_its_reference_as_an_object_and_no_settings(captured: io.StringIO) -> None:
    body = {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime",
            "metadata": {"name": "search", "namespace": "agents", "uid": "u-1"}}
    logger = kopf.LocalObjectLogger(body=body, settings=kopf.OperatorSettings())  # type: ignore[arg-type]
    logger.debug("Handler 'on_runtime' is invoked.")
    [record] = _lines(captured)
    _assert_common(record)
    assert record["logger"] == "kopf.objects"
    assert record[logs.REFKEY] == {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime",
                                   "name": "search", "uid": "u-1", "namespace": "agents"}
    assert "settings" not in record and "k8s_skip" not in record and "k8s_ref" not in record
    # Nothing of the settings object leaked in under another name either.
    assert "OperatorSettings" not in captured.getvalue()


def test_exceptions_and_warnings_are_json_too(captured: io.StringIO) -> None:
    try:
        raise ValueError("bad budget")
    except ValueError:
        logging.getLogger("baton.execute").exception("step failed")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning)
    sys.excepthook(KeyError, KeyError("boom"), None)
    failed, warned, crashed = _lines(captured)
    for record in (failed, warned, crashed):
        _assert_common(record)
    assert failed["severity"] == "ERROR" and "ValueError: bad budget" in failed["exception"]
    assert warned["logger"] == "py.warnings" and "deprecated thing" in warned["message"]
    assert crashed["severity"] == "CRITICAL" and "boom" in crashed["message"]


def test_kopf_follows_debug_and_otherwise_keeps_only_warnings(captured: io.StringIO) -> None:
    assert logging.getLogger("kopf").getEffectiveLevel() == logging.DEBUG
    logs.configure("INFO", stream=captured)
    assert logging.getLogger("kopf").getEffectiveLevel() == logging.WARNING
    logging.getLogger("kopf.reactor").info("dropped")
    logging.getLogger("baton").info("kept")
    assert [r["message"] for r in _lines(captured)] == ["kept"]


def test_non_ascii_messages_are_written_as_they_read_not_escaped(captured: io.StringIO) -> None:
    logging.getLogger("baton").info("handoff g1 → g2")
    raw = captured.getvalue()
    assert "g1 → g2" in raw and "\\u2192" not in raw
    assert _lines(captured)[-1]["message"] == "handoff g1 → g2"


def test_fatal_is_one_json_line_with_its_fields_and_no_traceback() -> None:
    buf = io.StringIO()
    logs.fatal("bad setting BATON_LEASE_SECONDS: Input should be a valid integer", stream=buf,
               variable="BATON_LEASE_SECONDS", version="1.2.3")
    [line] = buf.getvalue().splitlines()
    record = json.loads(line)
    _assert_common(record)
    assert record["severity"] == "CRITICAL" and record["logger"] == "baton"
    assert record["variable"] == "BATON_LEASE_SECONDS" and record["version"] == "1.2.3"
    assert "exception" not in record and "Traceback" not in line


_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def test_every_record_that_names_a_runtime_carries_it_as_a_field() -> None:
    """Static: a logging call in baton whose message names a runtime (`%s/%s`, or `runtime %s`)
    passes `extra` (the runtime's namespace/name under `runtime`); the formatter keeps it (above)
    and tests/integration/test_observability.py checks the records of a real pass."""
    import ast
    import pathlib

    import baton

    root = pathlib.Path(baton.__file__).parent
    missing = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _LEVELS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "log" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                continue
            text = node.args[0].value
            # ("Lease %s/%s" names a Lease of the installation, e.g. the gateway's registration or
            # the metrics Lease, not a runtime.)
            names_runtime = "%s/%s" in text.replace("Lease %s/%s", "")
            if (names_runtime or "runtime %s" in text) and not any(k.arg == "extra" for k in node.keywords):
                missing.append(f"{path.relative_to(root)}:{node.lineno}: {text}")
    assert not missing, "records naming a runtime without `runtime`:\n" + "\n".join(missing)
