"""The verbs: read what a verb needs through the cluster adapter, apply its rule, print its output.

Does I/O (through ``baton.cli.cluster``, and the streams in Io). Each runner returns the exit code.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, Callable, Mapping, NamedTuple, TextIO

from baton.cli import cluster, render, requests


class Io(NamedTuple):
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO


def _namespace(args: argparse.Namespace, connection: cluster.Cluster) -> str:
    return getattr(args, "namespace", None) or connection.default_namespace


def run_list(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    all_ns = bool(getattr(args, "all_namespaces", False))
    namespace = None if all_ns else _namespace(args, connection)
    if args.output != "text":
        items = cluster.list_runtimes(connection, namespace=namespace)
        print(render.render({"apiVersion": "v1", "kind": "List", "items": items}, output=args.output), file=io.stdout)
        return 0
    # The server's Table: the CRD's printer columns, as `kubectl get toolruntimes` prints them.
    table = cluster.list_table(connection, namespace=namespace)
    if not table.get("rows"):
        where = "" if namespace is None else f" in {namespace} namespace"
        print(f"No resources found{where}.", file=io.stderr)
        return 0
    print(render.server_table(table, all_namespaces=all_ns), file=io.stdout)
    return 0


def run_status(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    rt = cluster.get_runtime(connection, namespace=_namespace(args, connection), name=args.name)
    if args.output == "text":
        print(render.status_text(rt, now=datetime.datetime.now(datetime.timezone.utc)), file=io.stdout)
    else:
        data = {"namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
                "status": rt.get("status") or {}}
        print(render.render(data, output=args.output), file=io.stdout)
    return 0


def run_history(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    rt = cluster.get_runtime(connection, namespace=_namespace(args, connection), name=args.name)
    if args.output == "text":
        print(render.history_text(rt), file=io.stdout)
    else:
        data = {"namespace": rt["metadata"]["namespace"], "name": rt["metadata"]["name"],
                "history": render.history_entries(rt)}
        print(render.render(data, output=args.output), file=io.stdout)
    return 0


def _run_request(args: argparse.Namespace, connection: cluster.Cluster, io: Io, *, verb: str,
                 build: Callable[[Mapping[str, Any]], requests.Request], ask: bool) -> int:
    rt = cluster.get_runtime(connection, namespace=_namespace(args, connection), name=args.name)
    request = build(rt)
    if ask:
        abandons = request.abandons or {}
        requests.confirm(f"Force-delete pod {abandons.get('pod')} (uid {abandons.get('uid')}) of "
                         f"{rt['metadata']['namespace']}/{rt['metadata']['name']} generation {request.generation}, "
                         "abandoning it (its process may still run on its node)?",
                         yes=bool(getattr(args, "yes", False)), stdin=io.stdin, stderr=io.stderr)
    cluster.annotate(connection, rt=rt, key=request.annotation, value=str(request.generation))
    if args.output == "text":
        print(request.message, file=io.stdout)
    else:
        print(render.render(request.as_data(rt, verb=verb), output=args.output), file=io.stdout)
    return 0


def run_reset(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    return _run_request(args, connection, io, verb="reset", build=requests.reset_request, ask=False)


def run_force_recover(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    return _run_request(args, connection, io, verb="force-recover", build=requests.force_recovery_request, ask=True)


def run_force_retire(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    return _run_request(args, connection, io, verb="force-retire", ask=False,
                        build=lambda rt: requests.force_retire_request(rt, generation=args.generation))


def _run_suspend(args: argparse.Namespace, connection: cluster.Cluster, io: Io, *, suspend: bool) -> int:
    rt = cluster.get_runtime(connection, namespace=_namespace(args, connection), name=args.name)
    change = requests.suspend_request(rt, suspend=suspend)
    if change.changed:
        cluster.set_suspend(connection, rt=rt, suspend=suspend)
    if args.output == "text":
        print(change.message, file=io.stdout)
    else:
        print(render.render(change.as_data(rt, verb="suspend" if suspend else "resume"), output=args.output),
              file=io.stdout)
    return 0


def run_suspend(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    return _run_suspend(args, connection, io, suspend=True)


def run_resume(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    return _run_suspend(args, connection, io, suspend=False)


def run_release(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    """Remove Baton's finalizer (baton.dev/retire) from the named toolruntime, or every one of
    the namespace (-A: of the cluster), once no operator manages them: after `helm uninstall`, or
    after their namespace left the operator's watch. A conflict re-reads and tries again."""
    all_ns = bool(getattr(args, "all_namespaces", False))
    if args.name:
        if all_ns:
            raise requests.Refused("a toolruntime name cannot be given with -A/--all-namespaces")
        items = [cluster.get_runtime(connection, namespace=_namespace(args, connection), name=args.name)]
    else:
        items = cluster.list_runtimes(connection, namespace=None if all_ns else _namespace(args, connection))
    held = [rt for rt in items if requests.without_finalizer(rt) is not None]
    if held:
        requests.confirm(requests.release_question(held), yes=bool(getattr(args, "yes", False)),
                         stdin=io.stdin, stderr=io.stderr)
    released: list[dict[str, Any]] = []
    for rt in held:
        meta = rt["metadata"]
        for attempt in range(5):
            rest = requests.without_finalizer(rt)
            if rest is None:
                break  # released meanwhile (by someone else)
            try:
                cluster.set_finalizers(connection, rt=rt, finalizers=rest)
                break
            except cluster.ApiException as exc:
                if exc.status != 409 or attempt == 4:
                    raise
                rt = cluster.get_runtime(connection, namespace=meta["namespace"], name=meta["name"])
        released.append({"namespace": meta["namespace"], "name": meta["name"]})
    if args.output != "text":
        print(render.render({"verb": "release", "released": released}, output=args.output), file=io.stdout)
        return 0
    for r in released:
        print(f"toolruntime {r['namespace']}/{r['name']} released", file=io.stdout)
    if not released:
        print("No toolruntime holds Baton's finalizer" + ("" if all_ns or args.name else
                                                           f" in {_namespace(args, connection)} namespace") + ".",
              file=io.stderr)
    return 0
