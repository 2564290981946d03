"""The Grafana dashboard the chart ships: every query selects `cluster="$cluster"` (the variable
kubernetes-mixin dashboards use) and names only families the operator's or the gateway's
registry exports (or Prometheus's own `up`), so no panel stays silently empty after a rename.
That each query runs against a real Prometheus scraping a real operator:
tests/integration/test_alerts_live.py."""
from __future__ import annotations

import json
import pathlib
import re

from baton import collectors, metrics
from baton.gateway import gwmetrics  # noqa: F401 - registers the gateway's families

DASHBOARD = pathlib.Path(__file__).resolve().parents[3] / "charts" / "baton" / "dashboards" / "baton.json"
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",), "info": ("_info",)}


def _exported() -> set[str]:
    """Every series name a scrape can carry: the registry's, and those computed at scrape time."""
    families = [*metrics.REGISTRY.collect(),
                *collectors.RuntimeCollector(lambda: [("ns", "rt", {"Ready": "True"}, 1.0, 60.0)], idle=lambda: 1).collect(),
                *collectors.QueueCollector(lambda: [1.0]).collect(), *collectors.MemoryLimitCollector().collect()]
    names: set[str] = set()
    for family in families:
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def _queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = [(f"variable {v['name']}", v["query"]["query"]) for v in dash["templating"]["list"]
           if v["type"] == "query"]
    for panel in dash["panels"]:
        out += [(panel["title"], t["expr"]) for t in panel.get("targets", [])]
    return out


def test_every_query_names_only_exported_families() -> None:
    exported = _exported() | {"up"}
    assert "baton_passes_total" in exported and "baton_gateway_hold_seconds_bucket" in exported
    unknown = []
    for title, expr in _queries():
        selected = [name for name, _ in SELECTOR.findall(expr)]
        assert selected, f"{title}: no selector in {expr}"
        unknown += [f"{title}: {name}" for name in selected if name not in exported]
        # No metric named bare, outside a selector: this check would not see it.
        bare = SELECTOR.sub("", expr)
        assert not re.findall(r"\b(?:baton|process|python)_\w+", bare), f"{title}: a bare metric name in {expr}"
    assert not unknown, "queries name families nothing exports:\n" + "\n".join(unknown)


def test_every_selector_is_scoped_to_the_cluster_variable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert [v["name"] for v in dash["templating"]["list"]][:2] == ["datasource", "cluster"]
    for title, expr in _queries():
        if title == "variable cluster":
            continue  # the variable's own query lists every cluster
        for name, labels in SELECTOR.findall(expr):
            assert 'cluster="$cluster"' in labels, f"{title}: {name}{{{labels}}} ignores $cluster"


def test_the_operator_health_and_gateway_rows_are_there() -> None:
    dash = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert "Operator health" in rows and "Gateway" in rows
    exprs = " ".join(e for _, e in _queries())
    for family in ("baton_passes_total", "baton_pass_duration_seconds_bucket", "baton_queue_depth",
                   "baton_queue_duration_seconds_bucket", "baton_api_requests_total", "baton_watch_errors_total",
                   "process_resident_memory_bytes", "baton_memory_limit_bytes", "baton_gateway_held",
                   "baton_gateway_inflight", "baton_gateway_calls_total", "baton_gateway_hold_seconds_bucket"):
        assert family + "{" in exprs, f"no panel shows {family}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "two panels share an id"
