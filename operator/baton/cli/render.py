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
from typing import Any, Mapping

from baton.model import meta


def condition(rt: Mapping[str, Any], kind: str) -> dict[str, Any]:
    for c in (rt.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def server_table(table: Mapping[str, Any], *, all_namespaces: bool, extra: tuple[str, list[str]] | None = None) -> str:
    """A Table the API server sent (meta.k8s.io/v1, the CRD's additionalPrinterColumns) as
    `kubectl get` prints it: the priority-0 columns, headers upper-cased, NAMESPACE first with -A
    (from each row's object metadata), an empty cell for a value the object lacks, a text cut at
    its first line break with "...", and columns aligned as kubectl's tabwriter does. `extra`: a
    column the plugin adds last (a header and one cell per row, in order)."""
    shown = [i for i, c in enumerate(table.get("columnDefinitions") or []) if not c.get("priority")]
    columns = table.get("columnDefinitions") or []
    rows = [(["NAMESPACE"] if all_namespaces else []) + [str(columns[i].get("name", "")).upper() for i in shown]]
    for r in table.get("rows") or []:
        cells = r.get("cells") or []
        namespace = ((r.get("object") or {}).get("metadata") or {}).get("namespace", "")
        rows.append(([_cell(namespace)] if all_namespaces else [])
                    + [_cell(cells[i] if i < len(cells) else None) for i in shown])
    if extra is not None:
        header, values = extra
        rows[0].append(header)
        for row, value in zip(rows[1:], values):
            row.append(_cell(value))
    return aligned(rows)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"  # Go's fmt.Sprint
    text = str(value)
    cut = min((i for i in (text.find(c) for c in "\f\n\r") if i >= 0), default=-1)
    text = text if cut < 0 else text[:cut] + "..."
    # kubectl's printers.WriteEscaped: an escape sequence is shown, not acted on.
    return text.replace("\x1b", "^[")


def aligned(rows: list[list[str]]) -> str:
    """Go's text/tabwriter as kubectl sets it up (minwidth 6, padding 3, spaces): each cell but a
    line's last padded to its column's widest cell plus 3, at least 6."""
    widths = [max(6, max(len(r[i]) for r in rows) + 3) for i in range(len(rows[0]) - 1)]
    return "\n".join("".join(c.ljust(w) for c, w in zip(r, widths)) + r[-1] for r in rows)


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
        if t.get("message"):
            lines.append(f"    message: {t['message']}")
        calls = t.get("gatewayCalls")
        if isinstance(calls, dict) and t.get("step") in ("StoppingAdmission", "Draining"):
            lines.append(f"    gateway calls: {gateway_calls_text(calls, t)}")
        if isinstance(t.get("hook"), dict):
            lines.append(f"    hook: {hook_run_text(t['hook'], name=metadata['name'], now=now)}")
        if t.get("drainNote"):
            # What the drain did not do (calls still in flight at the gateway when drainSeconds ran
            # out, or nothing counted them), as the operator recorded it for the history entry.
            lines.append(f"    drain: {t['drainNote']}")
    else:
        lines.append("  transition: none")
    spec = rt.get("spec") or {}
    if (spec.get("service") or {}).get("gateway"):
        admission = (spec.get("budgets") or {}).get("admissionSeconds", 60)
        lines.append(f"  gateway: on: during a transition new calls are held, each at most {admission}s "
                     "(budgets.admissionSeconds), and the retiring generation drains its calls in flight")
    lines += idle_lines(spec.get("idle"), status.get("idle"), now=now)
    history = status.get("history") or []
    if history and history[-1].get("message"):
        last = history[-1]
        lines.append(f"  last retired: generation {last.get('generation')} ({last.get('outcome')}): {last['message']}")
    for entry, what in ((history[-1] if history else None, "last retired"), (status.get("current"), "current")):
        if isinstance(entry, dict) and hooks_text(entry.get("hooks")):
            lines.append(f"  hooks of generation {entry.get('generation')} ({what}): {hooks_text(entry.get('hooks'))}")
    if history:
        shown = sessions_text(history[-1], spec.get("service") or {})
        if shown:
            lines.append(f"  sessions: {shown}")
    failure = status.get("lastCleanupFailure")
    if failure:
        lines.append(f"  last cleanup failure: generation {failure['generation']} pod {failure.get('pod')} "
                     f"({failure.get('reason')}) at {failure.get('at')}: {failure.get('message')}")
    return "\n".join(lines)


def _ago(at: str | None, now: datetime.datetime) -> str:
    """ "2026-11-27T11:00:00Z (5m ago)"; the text as stored when it is no time."""
    when = meta.parse_time(at)
    if when is None:
        return str(at)
    secs = max(0, int((now - when).total_seconds()))
    age = f"{secs}s" if secs < 120 else f"{secs // 60}m" if secs < 7200 else f"{secs // 3600}h"
    return f"{at} ({age} ago)"


def idle_lines(idle_spec: Any, idle_status: Any, *, now: datetime.datetime) -> list[str]:
    """spec.idle and status.idle as lines: idle since when (or after how long it would be), and
    the last wake: when asked, how long it took to serve and how it ended."""
    if not isinstance(idle_spec, dict):
        return []
    idle = idle_status if isinstance(idle_status, dict) else {}
    after = idle_spec.get("afterSeconds", 900)
    if idle.get("since"):
        on_call = ("its next call wakes it" if idle_spec.get("wakeOnRequest", True) is not False
                   else "calls do not wake it (wakeOnRequest: false)")
        lines = [f"  idle: since {_ago(idle['since'], now)}: no pod; {on_call} (`kubectl baton wake` too)"]
    else:
        lines = [f"  idle: no (idled after {after}s without a call that counts: spec.idle.afterSeconds)"]
    wake = idle.get("lastWake")
    if isinstance(wake, dict):
        outcome = wake.get("outcome") or "under way"
        took = wake.get("seconds")
        latency = f" in {took:.1f}s" if isinstance(took, (int, float)) and not isinstance(took, bool) else ""
        ready = f", ready {wake['readyAt']}" if wake.get("readyAt") else ""
        text = f"  last wake: requested {_ago(wake.get('requestedAt'), now)}{ready}{latency} ({outcome})"
        if wake.get("message"):
            text += f": {wake['message']}"
        lines.append(text)
    return lines


def _seconds(value: Any) -> str:
    return f"{value:.1f}s" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?s"


def hook_run_text(run: Mapping[str, Any], *, name: str, now: datetime.datetime) -> str:
    """status.transition.hook as a line: "preRetire of generation 7: running since ... (attempt
    1)", or its outcome once known: "preRetire of generation 7: Failed (attempt 2): HTTP 500 ...;
    held: `kubectl baton retry NAME` runs it again, ..."."""
    attempt = run.get("attempts") or 1
    what = f"{run.get('hook')} of generation {run.get('generation')}"
    outcome = run.get("outcome")
    if not outcome:
        return f"{what}: running since {_ago(run.get('startedAt'), now)} (attempt {attempt})"
    text = f"{what}: {outcome} (attempt {attempt})" + (f": {run['message']}" if run.get("message") else "")
    if outcome == "Failed":
        text += f"; held: `kubectl baton retry {name}` runs it again" + (
            f", `kubectl baton force-recover {name}` retires without it" if run.get("hook") == "preRetire" else "")
    return text


def hooks_text(records: Any) -> str:
    """A history entry's hooks as a line: "postReady Ignored in 1.2s (2 attempts): HTTP 500;
    preRetire Succeeded in 0.4s"; empty when it has none."""
    if not isinstance(records, list):
        return ""
    shown = []
    for r in records:
        if not isinstance(r, dict):
            continue
        text = f"{r.get('hook')} {r.get('outcome')} in {_seconds(r.get('seconds'))}"
        attempts = r.get("attempts")
        if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts > 1:
            text += f" ({attempts} attempts)"
        if r.get("message"):
            text += f": {r['message']}"
        shown.append(text)
    return "; ".join(shown)


def sessions_text(entry: Mapping[str, Any], service: Mapping[str, Any]) -> str:
    """A history entry's sessionsToRebind as a line: "3 on generation 1, re-bound at their next
    call (sessions: Rebind)"; empty when it has none (no gateway, or the count was unknown). The
    mode shown is spec.service.sessions now (default Rebind), read from the raw object."""
    n = entry.get("sessionsToRebind")
    if not isinstance(n, int) or isinstance(n, bool):
        return ""
    mode = service.get("sessions") or "Rebind"
    what = "" if n == 0 else (", ended" if mode == "Expire" else
                              f", re-bound at {'its' if n == 1 else 'their'} next call")
    return f"{n} on generation {entry.get('generation')}{what} (sessions: {mode})"


def gateway_calls_text(calls: Mapping[str, Any], t: Mapping[str, Any]) -> str:
    """status.transition.gatewayCalls as a line: "1 in flight on g1, 2 held for g2 (2 of 2
    gateway replicas answered)"; a count the operator could not read shows as "?"."""
    def n(key: str) -> str:
        v = calls.get(key)
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else "?"
    def count(key: str) -> int:
        v = calls.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0
    asked, missing = count("replicas"), count("unconfirmed")
    if not asked:
        return "no live gateway replica (nothing can forward a call)"
    held_for = f"g{t['to']}" if t.get("to") else "the next generation"
    return (f"{n('inflight')} in flight on g{t.get('from') or '-'}, {n('held')} held for {held_for} "
            f"({asked - missing} of {asked} gateway replica{'' if asked == 1 else 's'} answered)")


def render(data: Any, *, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2)
    import yaml  # here: its import is a fifth of a plain call's time, and only -o yaml needs it

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip("\n")
