"""The chart's version against its content: every change to charts/baton bumps Chart.yaml's
`version` (CI checks it: tests/unit/chart/test_chart_version.py).

hack/chart-versions.txt holds one line per released chart version, `<version> <digest>`, where the
digest covers every file of charts/baton except Chart.yaml's `version:` line. A change to the
chart changes the digest; the check then fails until the version is bumped and a new line added:

    python3 hack/chart_version.py --add     # after bumping version in Chart.yaml
    python3 hack/chart_version.py           # prints the current version and digest, exit 1 if unrecorded
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "baton"
RECORD = ROOT / "hack" / "chart-versions.txt"
_VERSION_LINE = re.compile(r"^version:\s*(\S+)\s*$", re.MULTILINE)


def version() -> str:
    found = _VERSION_LINE.search((CHART / "Chart.yaml").read_text())
    if found is None:
        raise SystemExit("charts/baton/Chart.yaml: no `version:` line")
    return found.group(1).strip("\"'")


def digest() -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in CHART.rglob("*") if p.is_file()):
        rel = path.relative_to(CHART).as_posix()
        data = path.read_bytes()
        if rel == "Chart.yaml":
            data = _VERSION_LINE.sub("version: <bumped>", data.decode()).encode()
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def recorded() -> list[tuple[str, str]]:
    lines = [ln.split() for ln in RECORD.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return [(v, d) for v, d in lines]


def main(argv: list[str]) -> int:
    v, d = version(), digest()
    if argv[1:] == ["--add"]:
        if any(rv == v for rv, _ in recorded()):
            print(f"chart version {v} is already recorded: bump `version` in charts/baton/Chart.yaml first", file=sys.stderr)
            return 1
        with RECORD.open("a") as f:
            f.write(f"{v} {d}\n")
        print(f"recorded {v} {d}")
        return 0
    print(f"{v} {d}")
    return 0 if (v, d) in recorded() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
