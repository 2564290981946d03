"""kubectl-baton: the `kubectl baton` plugin (list, status, history, reset, force-recover, version).

A separate program from the operator: it reads and annotates ToolRuntimes through the API server
with the user's kubeconfig, and the operator does the work. It follows kubectl's conventions (and
krew's plugin guidelines): `-n/--namespace`, `-A/--all-namespaces`, `--kubeconfig`, `--context`,
`-o json|yaml`, `--help` on every verb, errors as one `error: ...` line on stderr.
Exit codes: 0 done; 1 refused or failed; 2 a usage error (argparse); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
from typing import Any, Callable, Mapping, Sequence, TextIO, cast

import kubernetes
import urllib3
import yaml
from kubernetes.client import exceptions as k8s_exceptions

import baton
from baton.model import names

OUTPUTS = ("text", "json", "yaml")


class Refused(Exception):
    """The verb does not apply, or the cluster cannot be reached: one line for the user."""


# -- pure helpers (formatting, dates) -----------------------------------------------------------


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


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
    start = _parse_time(created)
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
        meta, status = rt["metadata"], rt.get("status") or {}
        cur, ready, t = status.get("current") or {}, condition(rt, "Ready"), status.get("transition")
        row = [meta["name"], str(cur.get("generation", "-")), ready.get("status", "-"), ready.get("reason", "-"),
               cur.get("pod") or "-", f"{t.get('kind')}/{t.get('step')}" if t else "-",
               age(meta.get("creationTimestamp"), now=now)]
        rows.append(([meta.get("namespace", "")] if all_namespaces else []) + row)
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
        end = _parse_time(deadline)
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


@dataclasses.dataclass(frozen=True)
class Request:
    """An annotation the plugin is about to write, and what it means."""

    annotation: str
    generation: int
    message: str
    abandons: dict[str, Any] | None = None

    def as_data(self, rt: Mapping[str, Any], *, verb: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "ToolRuntime", "namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
            "verb": verb, "annotations": {self.annotation: str(self.generation)}, "generation": self.generation,
        }
        if self.abandons is not None:
            data["abandons"] = self.abandons
        data["message"] = self.message
        return data


def reset_request(rt: Mapping[str, Any]) -> Request:
    status = rt.get("status") or {}
    name = rt["metadata"]["name"]
    if (rt.get("spec") or {}).get("suspend"):
        raise Refused(f"toolruntime {name!r} is suspended: nothing to reset (set spec.suspend=false to start one)")
    current = (status.get("current") or {}).get("generation")
    if not current:
        raise Refused(f"toolruntime {name!r} has no current generation to reset")
    t = status.get("transition")
    if t:
        raise Refused(f"toolruntime {name!r} is in a transition ({t.get('kind')} step {t.get('step')}); "
                      "reset it once that is done")
    return Request(names.ANN_RESET, int(current), f"toolruntime/{name}: reset of generation {current} requested")


def force_recovery_request(rt: Mapping[str, Any]) -> Request:
    name = rt["metadata"]["name"]
    cond = condition(rt, "CleanupFailed")
    failure = (rt.get("status") or {}).get("lastCleanupFailure") or {}
    if cond.get("status") != "True" or not failure:
        raise Refused(f"toolruntime {name!r} has no cleanup failure to recover from "
                      f"(CleanupFailed={cond.get('status', 'Unknown')}, reason {cond.get('reason', '-')})")
    gen = int(failure["generation"])
    pod, uid = failure.get("pod"), failure.get("uid")
    return Request(names.ANN_FORCE_RECOVERY, gen,
                   f"toolruntime/{name}: force recovery of generation {gen} requested (abandons pod {pod} uid {uid})",
                   abandons={"pod": pod, "uid": uid})


def confirm(question: str, *, yes: bool, stdin: TextIO, stderr: TextIO) -> None:
    """Ask on a terminal; without one, only --yes goes ahead (a script must say so)."""
    if yes:
        return
    if not stdin.isatty():
        raise Refused("not a terminal, so not asking for confirmation: pass --yes to go ahead")
    stderr.write(f"{question} [y/N] ")
    stderr.flush()
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise Refused("not confirmed: nothing changed")


# -- the API (the plugin's adapter boundary) ---------------------------------------------------


@dataclasses.dataclass
class Cluster:
    api: kubernetes.client.CustomObjectsApi
    default_namespace: str
    server: str
    timeout: float


def connect(*, kubeconfig: str | None, context: str | None, timeout: float) -> Cluster:
    """Load the kubeconfig as kubectl would (--kubeconfig, else KUBECONFIG, else ~/.kube/config;
    in a pod without one, the in-cluster account)."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    paths = [p for p in path.split(os.pathsep) if p]
    config = kubernetes.client.Configuration()
    if not any(os.path.exists(p) for p in paths):
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
            namespace = _incluster_namespace()
            return _cluster(config, namespace=namespace, timeout=timeout)
        raise Refused(f"no kubeconfig: {path} does not exist (pass --kubeconfig, or set KUBECONFIG)")
    try:
        # kubernetes.config is not annotated (unlike kubernetes.client).
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=config)
        contexts, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException as exc:
        raise Refused(f"invalid kubeconfig {path}: {exc}") from exc
    except (OSError, yaml.YAMLError) as exc:
        raise Refused(f"cannot read kubeconfig {path}: {exc}") from exc
    if context:
        active = next((c for c in contexts if c["name"] == context), active)
    namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return _cluster(config, namespace=namespace, timeout=timeout)


def _incluster_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _cluster(config: kubernetes.client.Configuration, *, namespace: str, timeout: float) -> Cluster:
    # One attempt: an unreachable server is reported at once, as kubectl does, not retried.
    config.retries = 0
    api = kubernetes.client.CustomObjectsApi(kubernetes.client.ApiClient(config))
    return Cluster(api=api, default_namespace=namespace, server=config.host, timeout=timeout)


def get_runtime(cluster: Cluster, *, namespace: str, name: str) -> dict[str, Any]:
    try:
        # Custom objects come back as decoded JSON; the client annotates them as `object`.
        return dict(cast("dict[str, Any]", cluster.api.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL, name, _request_timeout=cluster.timeout)))
    except k8s_exceptions.ApiException as exc:
        if exc.status != 404:
            raise
        if _crd_missing(exc):
            raise
        hint = ""
        try:
            found = cast("dict[str, Any]", cluster.api.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.PLURAL, field_selector=f"metadata.name={name}",
                _request_timeout=cluster.timeout))
            spaces = sorted({i["metadata"]["namespace"] for i in found.get("items", [])})
            if spaces:
                hint = f"; it exists in namespace(s) {', '.join(spaces)} (use -n)"
        except k8s_exceptions.ApiException:
            pass  # not allowed to list cluster-wide: no hint
        raise Refused(f"toolruntime {name!r} not found in namespace {namespace!r}{hint}") from exc


def list_runtimes(cluster: Cluster, *, namespace: str | None) -> list[dict[str, Any]]:
    if namespace is None:
        found = cluster.api.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL,
                                                       _request_timeout=cluster.timeout)
    else:
        found = cluster.api.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.PLURAL,
                                                          _request_timeout=cluster.timeout)
    return [dict(i) for i in cast("dict[str, Any]", found).get("items", [])]


def annotate(cluster: Cluster, *, rt: Mapping[str, Any], key: str, value: str) -> None:
    meta = rt["metadata"]
    # resourceVersion: the check above was made on this version; a change since is a 409.
    cluster.api.patch_namespaced_custom_object(
        names.GROUP, names.VERSION, meta["namespace"], names.PLURAL, meta["name"],
        {"metadata": {"annotations": {key: value}, "resourceVersion": meta["resourceVersion"]}},
        _request_timeout=cluster.timeout,
    )


def _crd_missing(exc: k8s_exceptions.ApiException) -> bool:
    # A 404 for one object is a Status naming it (details.name); a 404 for the resource type has
    # no name, or is not a Status at all ("404 page not found").
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return True
    return not (isinstance(body, dict) and (body.get("details") or {}).get("name"))


def explain_api_error(exc: k8s_exceptions.ApiException) -> str:
    message = ""
    try:
        body = json.loads(exc.body or "{}")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except ValueError:
        pass
    if exc.status == 404 and _crd_missing(exc):
        return (f"the server does not serve {names.PLURAL}.{names.GROUP}/{names.VERSION}: is Baton's CRD installed? "
                "(kubectl apply -f crds/, or the Helm chart)")
    if exc.status == 409:
        return "the toolruntime changed while this ran; try again"
    if exc.status in (401, 403):
        return f"{exc.reason}: {message}" if message else f"{exc.status} {exc.reason}"
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


def unreachable_reason(exc: BaseException) -> str:
    """The root cause of a failed connection, without urllib3's object reprs."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        # NewConnectionError subclasses ConnectTimeoutError (urllib3's compatibility): not a timeout.
        timeout = (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError)
        if isinstance(cur, timeout) and not isinstance(cur, urllib3.exceptions.NewConnectionError):
            return "timed out"
        if isinstance(cur, OSError) and cur.strerror:
            return cur.strerror
        if isinstance(cur, urllib3.exceptions.SSLError):
            return f"TLS: {cur}"
        nxt = getattr(cur, "reason", None)
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
    text = str(exc)
    # urllib3's NewConnectionError starts with the connection object's repr: keep the message.
    return text.split("): ", 1)[-1] if "): " in text else text


# -- verbs --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Io:
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO


def _namespace(args: argparse.Namespace, cluster: Cluster) -> str:
    return getattr(args, "namespace", None) or cluster.default_namespace


def run_list(args: argparse.Namespace, cluster: Cluster, io: Io) -> int:
    all_ns = bool(getattr(args, "all_namespaces", False))
    namespace = None if all_ns else _namespace(args, cluster)
    items = list_runtimes(cluster, namespace=namespace)
    if args.output != "text":
        print(render({"apiVersion": "v1", "kind": "List", "items": items}, output=args.output), file=io.stdout)
        return 0
    if not items:
        where = "" if namespace is None else f" in {namespace} namespace"
        print(f"No resources found{where}.", file=io.stderr)
        return 0
    now = datetime.datetime.now(datetime.timezone.utc)
    print(table(list_rows(items, all_namespaces=all_ns, now=now)), file=io.stdout)
    return 0


def run_status(args: argparse.Namespace, cluster: Cluster, io: Io) -> int:
    rt = get_runtime(cluster, namespace=_namespace(args, cluster), name=args.name)
    if args.output == "text":
        print(status_text(rt, now=datetime.datetime.now(datetime.timezone.utc)), file=io.stdout)
    else:
        data = {"namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
                "status": rt.get("status") or {}}
        print(render(data, output=args.output), file=io.stdout)
    return 0


def run_history(args: argparse.Namespace, cluster: Cluster, io: Io) -> int:
    rt = get_runtime(cluster, namespace=_namespace(args, cluster), name=args.name)
    if args.output == "text":
        print(history_text(rt), file=io.stdout)
    else:
        data = {"namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
                "history": history_entries(rt)}
        print(render(data, output=args.output), file=io.stdout)
    return 0


def _run_request(args: argparse.Namespace, cluster: Cluster, io: Io, *, verb: str,
                 build: Callable[[Mapping[str, Any]], Request], ask: bool) -> int:
    rt = get_runtime(cluster, namespace=_namespace(args, cluster), name=args.name)
    request = build(rt)
    if ask:
        abandons = request.abandons or {}
        confirm(f"Force-delete pod {abandons.get('pod')} (uid {abandons.get('uid')}) of "
                f"{rt['metadata']['namespace']}/{rt['metadata']['name']} generation {request.generation}, "
                "abandoning it (its process may still run on its node)?",
                yes=bool(getattr(args, "yes", False)), stdin=io.stdin, stderr=io.stderr)
    annotate(cluster, rt=rt, key=request.annotation, value=str(request.generation))
    if args.output == "text":
        print(request.message, file=io.stdout)
    else:
        print(render(request.as_data(rt, verb=verb), output=args.output), file=io.stdout)
    return 0


def run_reset(args: argparse.Namespace, cluster: Cluster, io: Io) -> int:
    return _run_request(args, cluster, io, verb="reset", build=reset_request, ask=False)


def run_force_recover(args: argparse.Namespace, cluster: Cluster, io: Io) -> int:
    return _run_request(args, cluster, io, verb="force-recover", build=force_recovery_request, ask=True)


# -- command line -------------------------------------------------------------------------------


def _common(*, names: bool, all_namespaces: bool = False) -> argparse.ArgumentParser:
    """kubectl's flags, accepted on every verb, before or after the name. SUPPRESS: a flag given
    once is not reset by a later parser's default."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("kubectl options")
    g.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                   help="namespace of the toolruntime (default: the kubeconfig context's, else 'default')")
    if all_namespaces:
        g.add_argument("-A", "--all-namespaces", action="store_true", default=argparse.SUPPRESS,
                       help="list toolruntimes of every namespace")
    g.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="path to the kubeconfig file")
    g.add_argument("--context", default=argparse.SUPPRESS, help="the kubeconfig context to use")
    g.add_argument("--request-timeout", type=float, default=argparse.SUPPRESS, metavar="SECONDS",
                   help="give up on an API request after this long (default 30)")
    g.add_argument("-o", "--output", choices=OUTPUTS, default=argparse.SUPPRESS,
                   help="output format: text (default), json or yaml")
    if names:
        p.add_argument("name", help="name of the toolruntime")
    return p


VERBS: dict[str, tuple[Callable[[argparse.Namespace, Cluster, Io], int], str, str]] = {
    "list": (run_list, "list toolruntimes: generation, readiness, pod, transition under way",
             "examples:\n  kubectl baton list -n agents\n  kubectl baton list -A -o yaml"),
    "status": (run_status, "show a toolruntime's conditions, current generation and transition",
               "examples:\n  kubectl baton status search-mcp -n agents\n  kubectl baton status search-mcp -o json"),
    "history": (run_history, "list a toolruntime's retired generations and the current one",
                "examples:\n  kubectl baton history search-mcp -n agents"),
    "reset": (run_reset, "hand off to a fresh pod with the same template "
              f"(annotates {names.ANN_RESET} with the current generation)",
              "Refused while suspended or during a transition.\n\n"
              "examples:\n  kubectl baton reset search-mcp -n agents"),
    "force-recover": (run_force_recover, "abandon a pod that failed to terminate "
                      f"(annotates {names.ANN_FORCE_RECOVERY} with its generation)",
                      "Only while CleanupFailed=True. The pod is force-deleted (grace 0, finalizers\n"
                      "stripped) and its generation recorded as ForceRecovered; its process may still\n"
                      "run on its node. Asks for confirmation on a terminal; without one, pass --yes.\n\n"
                      "examples:\n  kubectl baton force-recover search-mcp -n agents\n"
                      "  kubectl baton force-recover search-mcp -n agents --yes"),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl baton", description="Operate Baton ToolRuntimes (a kubectl plugin).",
        epilog="Run 'kubectl baton VERB --help' for a verb's options.",
    )
    verbs = top.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, (_, summary, epilog) in VERBS.items():
        sub = verbs.add_parser(
            verb, help=summary, description=summary[0].upper() + summary[1:] + ".", epilog=epilog,
            parents=[_common(names=verb != "list", all_namespaces=verb == "list")],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if verb == "force-recover":
            sub.add_argument("-y", "--yes", action="store_true", default=False,
                             help="do not ask for confirmation (needed without a terminal)")
    verbs.add_parser("version", help="print the plugin's version",
                     description="Print the plugin's version.", parents=[_common(names=False)])
    return top


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    io = Io(stdin=stdin or sys.stdin, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr)
    args = parser().parse_args(argv)
    args.output = getattr(args, "output", "text")
    if args.verb == "version":
        data = {"name": "kubectl-baton", "version": baton.version()}
        print(f"kubectl-baton {data['version']}" if args.output == "text" else render(data, output=args.output),
              file=io.stdout)
        return 0
    run = VERBS[args.verb][0]
    server = "the API server"
    try:
        cluster = connect(kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None),
                          timeout=getattr(args, "request_timeout", 30.0))
        server = cluster.server
        return run(args, cluster, io)
    except Refused as exc:
        print(f"error: {exc}", file=io.stderr)
    except k8s_exceptions.ApiException as exc:
        print(f"error: {explain_api_error(exc)}", file=io.stderr)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        print(f"error: cannot reach the API server {server}: {unreachable_reason(exc)}", file=io.stderr)
    except KeyboardInterrupt:
        # Ctrl-C (at the confirmation, or a slow server): nothing more was sent.
        print("\nerror: interrupted", file=io.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
