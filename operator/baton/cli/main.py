"""kubectl-baton: the `kubectl baton` plugin (list, status, history, reset, force-recover, release,
version).

A separate program from the operator: it reads and annotates ToolRuntimes through the API server
with the user's kubeconfig, and the operator does the work. It follows kubectl's conventions (and
krew's plugin guidelines): `-n/--namespace`, `-A/--all-namespaces`, `--kubeconfig`, `--context`,
`-o json|yaml`, `--help` on every verb, errors as one `error: ...` line on stderr.
Exit codes: 0 done; 1 refused or failed; 2 a usage error (argparse); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, TextIO

import baton
from baton.cli import cluster, render, requests, verbs
from baton.model import names

OUTPUTS = ("text", "json", "yaml")


def _common(*, with_name: bool, all_namespaces: str = "") -> argparse.ArgumentParser:
    """kubectl's flags, accepted on every verb, before or after the name. SUPPRESS: a flag given
    once is not reset by a later parser's default."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("kubectl options")
    g.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                   help="namespace of the toolruntime (default: the kubeconfig context's, else 'default')")
    if all_namespaces:
        g.add_argument("-A", "--all-namespaces", action="store_true", default=argparse.SUPPRESS,
                       help=all_namespaces)
    g.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="path to the kubeconfig file")
    g.add_argument("--context", default=argparse.SUPPRESS, help="the kubeconfig context to use")
    g.add_argument("--request-timeout", type=float, default=argparse.SUPPRESS, metavar="SECONDS",
                   help="give up on an API request after this long (default 30)")
    g.add_argument("-o", "--output", choices=OUTPUTS, default=argparse.SUPPRESS,
                   help="output format: text (default), json or yaml")
    if with_name:
        p.add_argument("name", help="name of the toolruntime")
    return p


VERBS: dict[str, tuple[Callable[[argparse.Namespace, cluster.Cluster, verbs.Io], int], str, str]] = {
    "list": (verbs.run_list, "list toolruntimes: generation, readiness, pod, transition under way",
             "examples:\n  kubectl baton list -n agents\n  kubectl baton list -A -o yaml"),
    "status": (verbs.run_status, "show a toolruntime's conditions, current generation and transition",
               "examples:\n  kubectl baton status search-mcp -n agents\n  kubectl baton status search-mcp -o json"),
    "history": (verbs.run_history, "list a toolruntime's retired generations and the current one",
                "examples:\n  kubectl baton history search-mcp -n agents"),
    "reset": (verbs.run_reset, "hand off to a fresh pod with the same template "
              f"(annotates {names.ANN_RESET} with the current generation)",
              "Refused while suspended or during a transition.\n\n"
              "examples:\n  kubectl baton reset search-mcp -n agents"),
    "force-recover": (verbs.run_force_recover, "abandon a pod that failed to terminate "
                      f"(annotates {names.ANN_FORCE_RECOVERY} with its generation)",
                      "Only while CleanupFailed=True. The pod is force-deleted (grace 0, finalizers\n"
                      "stripped) and its generation recorded as ForceRecovered; its process may still\n"
                      "run on its node. Asks for confirmation on a terminal; without one, pass --yes.\n\n"
                      "examples:\n  kubectl baton force-recover search-mcp -n agents\n"
                      "  kubectl baton force-recover search-mcp -n agents --yes"),
    "release": (verbs.run_release, f"let go of toolruntimes no operator manages any more (removes {names.FINALIZER})",
                "After helm uninstall, or once a namespace left the operator's watch: removes the\n"
                "finalizer from the named toolruntime, or from every one in the namespace (-A: the\n"
                "cluster), so they and their namespace can be deleted. Their pods and Services\n"
                "keep running; deleting a released toolruntime removes them at once (the garbage\n"
                "collector), without a drain. An operator still watching the namespace adds the\n"
                "finalizer back: stop it, or remove the namespace from its watch, first.\n"
                "Asks for confirmation on a terminal; without one, pass --yes. docs/runbooks.md.\n\n"
                "examples:\n  kubectl baton release -n agents --yes\n  kubectl baton release -A --yes\n"
                "  kubectl baton release search-mcp -n agents"),
}


# The verbs that take -A/--all-namespaces, and what it means for each.
ALL_NAMESPACES = {"list": "list toolruntimes of every namespace",
                  "release": "release every toolruntime of the cluster"}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl baton", description="Operate Baton ToolRuntimes (a kubectl plugin).",
        epilog="Run 'kubectl baton VERB --help' for a verb's options.",
    )
    subparsers = top.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, (_, summary, epilog) in VERBS.items():
        sub = subparsers.add_parser(
            verb, help=summary, description=summary[0].upper() + summary[1:] + ".", epilog=epilog,
            parents=[_common(with_name=verb not in ("list", "release"), all_namespaces=ALL_NAMESPACES.get(verb, ""))],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if verb == "release":
            sub.add_argument("name", nargs="?", default=None,
                             help="name of the toolruntime (default: every one of the namespace)")
        if verb in ("force-recover", "release"):
            sub.add_argument("-y", "--yes", action="store_true", default=False,
                             help="do not ask for confirmation (needed without a terminal)")
    subparsers.add_parser("version", help="print the plugin's version",
                     description="Print the plugin's version.", parents=[_common(with_name=False)])
    return top


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    io = verbs.Io(stdin=stdin or sys.stdin, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr)
    args = parser().parse_args(argv)
    args.output = getattr(args, "output", "text")
    if args.verb == "version":
        data = {"name": "kubectl-baton", "version": baton.version()}
        print(f"kubectl-baton {data['version']}" if args.output == "text" else render.render(data, output=args.output),
              file=io.stdout)
        return 0
    run = VERBS[args.verb][0]
    server = "the API server"
    try:
        connection = cluster.connect(kubeconfig=getattr(args, "kubeconfig", None),
                                     context=getattr(args, "context", None),
                                     timeout=getattr(args, "request_timeout", 30.0))
        server = connection.server
        return run(args, connection, io)
    except requests.Refused as exc:
        print(f"error: {exc}", file=io.stderr)
    except cluster.ApiException as exc:
        print(f"error: {cluster.explain_api_error(exc)}", file=io.stderr)
    except (cluster.HTTPError, OSError) as exc:
        print(f"error: cannot reach the API server {server}: {cluster.unreachable_reason(exc)}", file=io.stderr)
    except KeyboardInterrupt:
        # Ctrl-C (at the confirmation, or a slow server): nothing more was sent.
        print("\nerror: interrupted", file=io.stderr)
        return 130
    return 1

