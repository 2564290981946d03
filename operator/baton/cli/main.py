"""kubectl-baton: the `kubectl baton` plugin (list, status, history, reset, force-recover, suspend,
resume, force-retire, retry, wake, release, completion, version).

A separate program from the operator: it reads and annotates ToolRuntimes through the API server
with the user's kubeconfig, and the operator does the work. It follows kubectl's conventions (and
krew's plugin guidelines): `-n/--namespace`, `-A/--all-namespaces`, `--kubeconfig`, `--context`,
`--request-timeout`, `--as`, `--as-group`, `-o json|yaml`, `--help` on every verb, errors as one `error: ...` line on stderr.
Exit codes: 0 done; 1 refused or failed; 2 a usage error (argparse); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, TextIO

import baton
from baton.cli import cluster, completion, render, requests, verbs
from baton.model import names

OUTPUTS = ("text", "json", "yaml")
DEFAULT_TIMEOUT = 30.0


def _duration(text: str) -> float | None:
    try:
        return requests.parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _generation(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"invalid generation {text!r}: a positive integer")
    return int(text)


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
    g.add_argument("--request-timeout", type=_duration, default=argparse.SUPPRESS, metavar="DURATION",
                   help="give up on an API request after this long: 30s, 1m, plain seconds; 0: never (default 30s)")
    g.add_argument("--as", dest="as_user", default=argparse.SUPPRESS, metavar="USER",
                   help="the user to impersonate for every request")
    g.add_argument("--as-group", dest="as_groups", action="append", default=argparse.SUPPRESS, metavar="GROUP",
                   help="a group to impersonate (repeat it for several; needs --as)")
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
    "suspend": (verbs.run_suspend, "retire the current generation and start none (sets spec.suspend=true)",
                "The generation retires as a handoff's would, within its budgets (a pinned one waits\n"
                "for its ToolRuntimeClaims first, at most budgets.pinSeconds). Already suspended: says so.\n\n"
                "examples:\n  kubectl baton suspend search-mcp -n agents"),
    "resume": (verbs.run_resume, "start a new generation of a suspended toolruntime (sets spec.suspend=false)",
               "Not suspended: says so.\n\nexamples:\n  kubectl baton resume search-mcp -n agents"),
    "force-retire": (verbs.run_force_retire, "retire a generation its pins hold "
                     f"(annotates {names.ANN_FORCE_RETIRE} with --generation)",
                     "Only while that generation's retire waits for ToolRuntimeClaim pins\n"
                     "(Progressing=AwaitingPinRelease, or RetirementBlocked=True); any other generation is\n"
                     "refused here, and by the operator as stale. The consumers that pinned it lose it.\n"
                     "Without the plugin: kubectl annotate trt NAME baton.dev/force-retire=N\n\n"
                     "examples:\n  kubectl baton force-retire search-mcp --generation 3 -n agents"),
    "retry": (verbs.run_retry, f"run a failed hook again (annotates {names.ANN_RETRY_HOOK} with its generation)",
              "Only while a hook with failurePolicy Fail holds the toolruntime: CleanupFailed=True\n"
              "(preRetire) or Degraded=True (postReady), reason HookFailed. The generation is read\n"
              "from status; the operator runs the hook again and removes the annotation. To retire\n"
              "past a failed preRetire hook instead: kubectl baton force-recover. docs/hooks.md.\n"
              "Without the plugin: kubectl annotate trt NAME baton.dev/retry-hook=N\n\n"
              "examples:\n  kubectl baton retry search-mcp -n agents"),
    "wake": (verbs.run_wake, f"wake an idle toolruntime now (annotates {names.ANN_WAKE} with the time)",
             "Only for a toolruntime with spec.idle; one that is not idle: says so, writes nothing.\n"
             "The operator starts the generation as a call would (fenced as every start): Ready within\n"
             "spec.idle.wakeSeconds, or WakeFailed and a back-off. `kubectl baton status` shows the last\n"
             "wake and its latency. Without the plugin:\n"
             "  kubectl annotate trt NAME baton.dev/wake=$(date -u +%Y-%m-%dT%H:%M:%SZ) --overwrite\n\n"
             "examples:\n  kubectl baton wake search-mcp -n agents"),
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
        if verb == "list":
            sub.add_argument("--owner", action="store_true", default=argparse.SUPPRESS,
                             help="add an OWNER column: the operator replica whose range the toolruntime falls in "
                                  "(with BATON_SHARD_RANGES > 0; reads the range Leases once)")
            sub.add_argument("--operator-namespace", default=argparse.SUPPRESS, metavar="NAMESPACE",
                             help="where Baton runs, for --owner (default: its range Leases in any namespace)")
        if verb == "release":
            sub.add_argument("name", nargs="?", default=None,
                             help="name of the toolruntime (default: every one of the namespace)")
        if verb == "force-retire":
            sub.add_argument("--generation", type=_generation, required=True, metavar="N",
                             help="the generation to retire: the one whose retire waits for pins")
        if verb in ("force-recover", "release"):
            sub.add_argument("-y", "--yes", action="store_true", default=False,
                             help="do not ask for confirmation (needed without a terminal)")
    comp = subparsers.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description="Print a shell completion script for kubectl-baton (bash or zsh).",
        epilog="examples:\n  source <(kubectl baton completion bash)\n"
               "  kubectl baton completion zsh > \"${fpath[1]}/_kubectl-baton\"",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    comp.add_argument("shell", choices=completion.SHELLS, help="the shell: bash or zsh")
    subparsers.add_parser("version", help="print the plugin's version",
                     description="Print the plugin's version.", parents=[_common(with_name=False)])
    return top


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    io = verbs.Io(stdin=stdin or sys.stdin, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr)
    try:
        return _main(parser().parse_args(argv), io)
    except BrokenPipeError:
        # The reader went away (`kubectl baton list | head -1`): nothing more to say, no traceback.
        # stdout is pointed at /dev/null so that the interpreter's last flush fails no more.
        if io.stdout is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(args: argparse.Namespace, io: verbs.Io) -> int:
    args.output = getattr(args, "output", "text")
    if args.verb == "version":
        data = {"name": "kubectl-baton", "version": baton.version()}
        print(f"kubectl-baton {data['version']}" if args.output == "text" else render.render(data, output=args.output),
              file=io.stdout)
        return 0
    if args.verb == "completion":
        print(completion.script(parser(), shell=args.shell), end="", file=io.stdout)
        return 0
    run = VERBS[args.verb][0]
    server = "the API server"
    try:
        connection = cluster.connect(
            kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None),
            timeout=getattr(args, "request_timeout", DEFAULT_TIMEOUT),
            impersonate=cluster.Impersonation(user=getattr(args, "as_user", None),
                                              groups=tuple(getattr(args, "as_groups", ()))))
        server = connection.server
        return run(args, connection, io)
    except requests.Refused as exc:
        print(f"error: {exc}", file=io.stderr)
    except cluster.ApiException as exc:
        print(f"error: {cluster.explain_api_error(exc)}", file=io.stderr)
    except cluster.Unreachable as exc:
        print(f"error: cannot reach the API server {server}: {exc}", file=io.stderr)
    except KeyboardInterrupt:
        # Ctrl-C (at the confirmation, or a slow server): nothing more was sent.
        print("\nerror: interrupted", file=io.stderr)
        return 130
    return 1

