"""Every change to the chart bumps its version (hack/chart_version.py)."""

from __future__ import annotations

from packaging import version as pv

from hack import chart_version


def test_the_chart_content_is_recorded_under_the_current_version() -> None:
    v, d = chart_version.version(), chart_version.digest()
    recorded = dict(chart_version.recorded())
    assert v in recorded, (f"chart version {v} is not in hack/chart-versions.txt: "
                           "run `python3 hack/chart_version.py --add`")
    assert recorded[v] == d, (f"charts/baton changed since version {v} was recorded ({recorded[v]} -> {d}): "
                              "bump `version` in charts/baton/Chart.yaml, then `python3 hack/chart_version.py --add`")


def test_the_record_is_one_line_a_version_in_increasing_order() -> None:
    versions = [v for v, _ in chart_version.recorded()]
    assert len(versions) == len(set(versions))
    assert versions == sorted(versions, key=pv.Version)
    assert versions[-1] == chart_version.version()
