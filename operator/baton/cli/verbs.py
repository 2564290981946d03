"""The verbs: read what a verb needs through the cluster adapter, apply its rule, print its output.

Does I/O (through ``baton.cli.cluster``, and the streams in Io). Each runner returns the exit code.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, Callable, Mapping, NamedTuple, TextIO

from baton.cli import cluster, owners, render, requests
from baton.model import names


class Io(NamedTuple):
    stdin: TextIO
    stdout: TextIO
    stderr: TextIO


def _namespace(args: argparse.Namespace, connection: cluster.Cluster) -> str:
    return getattr(args, "namespace", None) or connection.default_namespace


def run_list(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    all_ns = bool(getattr(args, "all_namespaces", False))
    namespace = None if all_ns else _namespace(args, connection)
    with_owner = bool(getattr(args, "owner", False))
    if with_owner and args.output != "text":
        raise requests.Refused("--owner adds a column to the table: it cannot be combined with -o json|yaml")
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
    extra: tuple[str, list[str]] | None = None
    if with_owner:
        extra = ("OWNER", _owners(args, connection, table, io))
    print(render.server_table(table, all_namespaces=all_ns, extra=extra), file=io.stdout)
    return 0


def _owners(args: argparse.Namespace, connection: cluster.Cluster, table: Mapping[str, Any], io: Io) -> list[str]:
    """The OWNER cell of each row: the holder of the range Lease its UID falls in (baton.cli.owners)."""
    operator_ns = getattr(args, "operator_namespace", None)
    try:
        leases = cluster.list_range_leases(connection, namespace=operator_ns)
    except cluster.ApiException as exc:
        if exc.status in (401, 403) and operator_ns is None:
            raise requests.Refused("--owner reads the operator's range Leases; listing Leases in every namespace was "
                                   "refused: pass --operator-namespace (the namespace Baton runs in)") from exc
        raise
    ranges = owners.ranges_from(leases, now=datetime.datetime.now(datetime.timezone.utc))
    rows = table.get("rows") or []
    if ranges is None:
        where = f"in namespace {operator_ns}" if operator_ns else "in any namespace"
        print(f"No range Leases {where}: sharding is off (BATON_SHARD_RANGES=0), so any replica may act on any "
              "runtime; during a transition the holder of the runtime's own Lease does.", file=io.stderr)
        return ["-" for _ in rows]
    if len(ranges.namespaces) > 1:
        raise requests.Refused(f"range Leases in namespaces {', '.join(ranges.namespaces)} (several installations): "
                               "pass --operator-namespace")
    return [owners.owner(str(((r.get("object") or {}).get("metadata") or {}).get("uid") or ""), ranges) for r in rows]


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


def run_retry(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    return _run_request(args, connection, io, verb="retry", build=requests.retry_hook_request, ask=False)


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


def run_wake(args: argparse.Namespace, connection: cluster.Cluster, io: Io) -> int:
    rt = cluster.get_runtime(connection, namespace=_namespace(args, connection), name=args.name)
    wake = requests.wake_request(rt, now=datetime.datetime.now(datetime.timezone.utc))
    if wake.value:
        cluster.annotate(connection, rt=rt, key=names.ANN_WAKE, value=wake.value)
    if args.output == "text":
        print(wake.message, file=io.stdout)
    else:
        print(render.render(wake.as_data(rt), output=args.output), file=io.stdout)
    return 0


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
