"""kubectl-baton: `kubectl baton reset|force-recover|history|status NAME` (a kubectl plugin).

Reads and annotates ToolRuntimes through the API server with the user's kubeconfig; the
operator does the work. Exit codes: 0 done, 1 refused or failed (message on stderr).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, cast

import kubernetes
from kubernetes.client import exceptions as k8s_exceptions

GROUP, VERSION, PLURAL = "baton.dev", "v1alpha1", "toolruntimes"


class Refused(Exception):
    """The verb does not apply (missing runtime, wrong namespace, wrong state)."""


def _api(kubeconfig: str | None, context: str | None) -> tuple[kubernetes.client.CustomObjectsApi, str]:
    # kubernetes.config is not annotated (unlike kubernetes.client).
    kubernetes.config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
    _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    if context:
        contexts, _ = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        active = next((c for c in contexts if c["name"] == context), active)
    default_ns = (active or {}).get("context", {}).get("namespace") or "default"
    return kubernetes.client.CustomObjectsApi(), default_ns


def _get(api: kubernetes.client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    try:
        # Custom objects come back as decoded JSON; the client annotates them as `object`.
        return dict(cast("dict[str, Any]", api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)))
    except k8s_exceptions.ApiException as exc:
        if exc.status != 404:
            raise Refused(f"reading toolruntime {name!r} in namespace {namespace!r} failed: {exc.status} {exc.reason}") from exc
        hint = ""
        try:
            found = cast("dict[str, Any]", api.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, field_selector=f"metadata.name={name}"))
            spaces = sorted({i["metadata"]["namespace"] for i in found.get("items", [])})
            if spaces:
                hint = f"; it exists in namespace(s) {', '.join(spaces)} (use -n)"
        except k8s_exceptions.ApiException:
            pass  # not allowed to list cluster-wide: no hint
        raise Refused(f"toolruntime {name!r} not found in namespace {namespace!r}{hint}") from exc


def _condition(rt: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in (rt.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def _annotate(api: kubernetes.client.CustomObjectsApi, rt: dict[str, Any], key: str, value: str) -> None:
    meta = rt["metadata"]
    api.patch_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
        {"metadata": {"annotations": {key: value}, "resourceVersion": meta["resourceVersion"]}},
    )


def cmd_reset(api: kubernetes.client.CustomObjectsApi, rt: dict[str, Any]) -> str:
    status = rt.get("status") or {}
    name = rt["metadata"]["name"]
    if rt["spec"].get("suspend"):
        raise Refused(f"toolruntime {name!r} is suspended: nothing to reset (set spec.suspend=false to start one)")
    current = (status.get("current") or {}).get("generation")
    if not current:
        raise Refused(f"toolruntime {name!r} has no current generation to reset")
    t = status.get("transition")
    if t:
        raise Refused(f"toolruntime {name!r} is in a transition ({t.get('kind')} step {t.get('step')}); "
                      "reset it once that is done")
    _annotate(api, rt, "baton.dev/reset", str(current))
    return f"toolruntime/{name}: reset of generation {current} requested"


def cmd_force_recover(api: kubernetes.client.CustomObjectsApi, rt: dict[str, Any]) -> str:
    name = rt["metadata"]["name"]
    cond = _condition(rt, "CleanupFailed")
    failure = (rt.get("status") or {}).get("lastCleanupFailure") or {}
    if cond.get("status") != "True" or not failure:
        raise Refused(f"toolruntime {name!r} has no cleanup failure to recover from "
                      f"(CleanupFailed={cond.get('status', 'Unknown')}, reason {cond.get('reason', '-')})")
    gen = failure["generation"]
    _annotate(api, rt, "baton.dev/force-recovery", str(gen))
    return (f"toolruntime/{name}: force recovery of generation {gen} requested "
            f"(abandons pod {failure.get('pod')} uid {failure.get('uid')})")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def cmd_history(api: kubernetes.client.CustomObjectsApi, rt: dict[str, Any]) -> str:
    status = rt.get("status") or {}
    rows = [["GENERATION", "POD", "UID", "STARTED", "RETIRED", "OUTCOME"]]
    for h in status.get("history") or []:
        rows.append([str(h.get("generation")), h.get("pod") or "-", h.get("uid") or "-",
                     h.get("startedAt") or "-", h.get("retiredAt") or "-", h.get("outcome") or "-"])
    cur = status.get("current")
    if cur:
        rows.append([str(cur["generation"]), cur.get("pod") or "-", cur.get("uid") or "-",
                     cur.get("startedAt") or "-", "-", "Current"])
    return _table(rows)


def cmd_status(api: kubernetes.client.CustomObjectsApi, rt: dict[str, Any]) -> str:
    status = rt.get("status") or {}
    meta = rt["metadata"]
    cur = status.get("current") or {}
    lines = [
        f"ToolRuntime {meta['namespace']}/{meta['name']}",
        f"  generation: {cur.get('generation', '-')}  pod: {cur.get('pod', '-')}  uid: {cur.get('uid', '-')}",
        f"  fencing token: {status.get('fencingToken', 0)}  last written by: {status.get('holder', '-')}",
        "  conditions:",
    ]
    for c in status.get("conditions") or []:
        lines.append(f"    {c['type']:<14} {c['status']:<6} {c.get('reason', ''):<22} {c.get('message', '')}")
    t = status.get("transition")
    if t:
        deadline = t.get("deadline")
        left = ""
        if deadline:
            secs = (datetime.datetime.fromisoformat(deadline.replace("Z", "+00:00"))
                    - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
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


VERBS = {"reset": cmd_reset, "force-recover": cmd_force_recover, "history": cmd_history, "status": cmd_status}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubectl baton", description="Operate Baton ToolRuntimes.")
    parser.add_argument("verb", choices=sorted(VERBS))
    parser.add_argument("name")
    parser.add_argument("-n", "--namespace")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = parser.parse_args(argv)
    try:
        api, default_ns = _api(args.kubeconfig, args.context)
        rt = _get(api, args.namespace or default_ns, args.name)
        out = VERBS[args.verb](api, rt)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except k8s_exceptions.ApiException as exc:
        if exc.status == 409:
            print("error: the toolruntime changed while this ran; try again", file=sys.stderr)
        else:
            print(f"error: {exc.status} {exc.reason}", file=sys.stderr)
        return 1
    if args.output == "json" and args.verb in ("history", "status"):
        out = json.dumps(rt.get("status") or {}, indent=2)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
