"""The plugin's output: kubectl-style tables and durations, status and history text, json/yaml.

Pure: ToolRuntimes in (as the API server returns them: plain dicts, tolerating values and fields a
newer operator writes), strings out; no I/O.

Why plain dicts and not ``baton.model.status.ToolRuntimeStatus``: the model requires fields
(``transition.startedAt``, ``current.templateHash``, ...) that a partial or newer status may lack, so
one missing field would fail the whole verb; and it parses times and enums, which would print
differently (``TransitionKind.HANDOFF``, ``2026-11-30 11:59:30+00:00``) from what the server stored.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping, Sequence

import yaml

from baton.model import meta


def human_duration(seconds: float) -> str:
    """kubectl's AGE style: 45s, 3m20s, 42m, 5h10m, 30h, 3d4h, 120d, 2y."""
    s = max(0, int(seconds))
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y"


def age(created: str | None, *, now: datetime.datetime) -> str:
    start = meta.parse_time(created)
    return "<unknown>" if start is None else human_duration((now - start).total_seconds())


def condition(rt: Mapping[str, Any], kind: str) -> dict[str, Any]:
    for c in (rt.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def list_rows(items: Sequence[Mapping[str, Any]], *, all_namespaces: bool, now: datetime.datetime) -> list[list[str]]:
    """`kubectl get trt` columns (and NAMESPACE with -A), plus the transition under way."""
    head = ["NAME", "GENERATION", "READY", "REASON", "POD", "TRANSITION", "AGE"]
    rows = [(["NAMESPACE"] if all_namespaces else []) + head]
    for rt in sorted(items, key=lambda i: (i["metadata"].get("namespace", ""), i["metadata"]["name"])):
        metadata, status = rt["metadata"], rt.get("status") or {}
        cur, ready, t = status.get("current") or {}, condition(rt, "Ready"), status.get("transition")
        row = [metadata["name"], str(cur.get("generation", "-")), ready.get("status", "-"), ready.get("reason", "-"),
               cur.get("pod") or "-", f"{t.get('kind')}/{t.get('step')}" if t else "-",
               age(metadata.get("creationTimestamp"), now=now)]
        rows.append(([metadata.get("namespace", "")] if all_namespaces else []) + row)
    return rows


def history_entries(rt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The retired generations, oldest first, then the current one with outcome Current."""
    status = rt.get("status") or {}
    entries = [dict(h) for h in status.get("history") or []]
    cur = status.get("current")
    if cur:
        entries.append({**cur, "outcome": "Current"})
    return entries


def history_text(rt: Mapping[str, Any]) -> str:
    rows = [["GENERATION", "POD", "UID", "STARTED", "RETIRED", "OUTCOME"]]
    for h in history_entries(rt):
        rows.append([str(h.get("generation")), h.get("pod") or "-", h.get("uid") or "-",
                     h.get("startedAt") or "-", h.get("retiredAt") or "-", h.get("outcome") or "-"])
    return table(rows)


def status_text(rt: Mapping[str, Any], *, now: datetime.datetime) -> str:
    status = rt.get("status") or {}
    metadata = rt["metadata"]
    cur = status.get("current") or {}
    lines = [
        f"ToolRuntime {metadata['namespace']}/{metadata['name']}",
        f"  generation: {cur.get('generation', '-')}  pod: {cur.get('pod', '-')}  uid: {cur.get('uid', '-')}",
        f"  fencing token: {status.get('fencingToken', 0)}  last written by: {status.get('holder', '-')}",
        "  conditions:",
    ]
    for c in status.get("conditions") or []:
        lines.append(f"    {c['type']:<14} {c['status']:<6} {c.get('reason', ''):<22} {c.get('message', '')}")
    t = status.get("transition")
    if t:
        deadline = t.get("deadline")
        end = meta.parse_time(deadline)
        left = ""
        if end is not None:
            secs = (end - now).total_seconds()
            left = f" ({secs:.0f}s left)" if secs >= 0 else f" ({-secs:.0f}s past)"
        lines.append(f"  transition: {t.get('kind')} g{t.get('from') or '-'} -> g{t.get('to') or '-'} "
                     f"({t.get('trigger')}), step {t.get('step')}, deadline {deadline or '-'}{left}")
    else:
        lines.append("  transition: none")
    failure = status.get("lastCleanupFailure")
    if failure:
        lines.append(f"  last cleanup failure: generation {failure['generation']} pod {failure.get('pod')} "
                     f"({failure.get('reason')}) at {failure.get('at')}: {failure.get('message')}")
    return "\n".join(lines)


def render(data: Any, *, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip("\n")
