"""`python -m baton`: run the operator (kopf underneath, peering off)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

import kopf

import baton
from baton import faults as faults_mod
from baton import activities, logs
from baton import settings as settings_mod
from baton.k8s import client

if TYPE_CHECKING:
    # kopf exports no public name for its peer identity type (a NewType of str).
    from kopf._core.engines.peering import Identity


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="baton", description="Baton: tool-runtime generations, one at a time.")
    parser.add_argument("--namespace", action="append", default=[],
                        help="watch only this namespace (repeatable; default: BATON_NAMESPACES, else all)")
    parser.add_argument("--version", action="version", version=f"baton {baton.version()}")
    args = parser.parse_args(argv)
    settings = settings_mod.Settings.from_env()
    if args.namespace:
        settings = settings_mod.Settings(**{**settings.__dict__, "namespaces": tuple(args.namespace)})
    logs.configure(settings.log_level)
    try:
        client.load_config()
    except ValueError as exc:
        # A connection setting Baton cannot honour: refused before anything connects.
        print(f"baton: {exc}", file=sys.stderr)
        return 2
    # Read once: the fault injection (tests only) and the clock it shifts, passed down from here.
    faults = faults_mod.Faults.from_env()
    activities.install(settings, clock=faults.clock(), faults=faults)
    kopf.run(
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=list(settings.namespaces),
        identity=cast("Identity", settings.identity),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
