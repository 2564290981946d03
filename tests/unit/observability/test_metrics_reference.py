"""docs/metrics.md names every `baton_*` family the registry holds (the operator's, the per-runtime
gauges computed at scrape time, the gateway's), with its type and labels as scraped, and no
family that does not exist."""
from __future__ import annotations

import pathlib
import re

from baton import collectors, metrics
from baton.gateway import gwmetrics  # noqa: F401 - registers the gateway's families

PAGE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(baton_[a-z_]+)` \| (counter|gauge|histogram|info) \|([^|]*)\|", re.M)


def _documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    rows = ROW.findall(PAGE.read_text())
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names)), "a family is listed twice"
    return {name: (kind, tuple(re.findall(r"`([a-z_]+)`", labels))) for name, kind, labels in rows}


def _scraped_name(name: str, kind: str) -> str:
    return name + {"counter": "_total", "info": "_info"}.get(kind, "")


def _registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for collector in list(metrics.REGISTRY._collector_to_names):  # every collector, ours and custom
        labelnames = getattr(collector, "_labelnames", None)
        if labelnames is not None:  # a prometheus_client Counter/Gauge/Histogram/Info
            name, kind = collector._name, collector._type
            if kind == "info":  # its labels are the values given to .info()
                labelnames = tuple(k for f in collector.collect() for k in f.samples[0].labels)
            if name.startswith("baton_"):
                found[_scraped_name(name, kind)] = (kind, tuple(labelnames))
    # Families computed at scrape time: fed one runtime so that their labels show.
    runtime = collectors.RuntimeCollector(lambda: [("ns", "rt", {"Ready": "True"}, 1.0, 60.0)], idle=lambda: 1)
    queue = collectors.QueueCollector(lambda: [0.5])
    for family in [*runtime.collect(), *queue.collect(), *collectors.MemoryLimitCollector().collect()]:
        labels: list[str] = []
        for sample in family.samples:
            labels += [k for k in sample.labels if k not in labels]
        found[_scraped_name(family.name, family.type)] = (family.type, tuple(labels))
    return found


def test_the_page_lists_every_registered_family_and_no_other() -> None:
    documented, registered = _documented(), _registered()
    assert len(registered) > 40  # the operator's, the per-runtime and the gateway's
    missing = sorted(set(registered) - set(documented))
    unknown = sorted(set(documented) - set(registered))
    assert not missing, f"docs/metrics.md does not name: {missing}"
    assert not unknown, f"docs/metrics.md names families that do not exist: {unknown}"


def test_each_family_has_its_type_and_labels() -> None:
    documented, registered = _documented(), _registered()
    for name, (kind, labels) in registered.items():
        doc_kind, doc_labels = documented[name]
        assert doc_kind == kind, f"{name}: documented as {doc_kind}, registered as {kind}"
        # The memory limit is absent when unlimited (no sample, so no labels to compare).
        if labels or name != "baton_memory_limit_bytes":
            assert doc_labels == labels, f"{name}: documented labels {doc_labels}, registered {labels}"
