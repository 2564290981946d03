"""`python -m baton`: run the operator (kopf underneath, peering off)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, cast

import kopf

import baton
from baton import faults as faults_mod
from baton import activities, logs
from baton import settings as settings_mod
from baton.k8s import client, configrefs

# kopf exports no public name for the error kopf.run raises when a startup activity failed.
from kopf._core.engines import activities as kopf_activities

if TYPE_CHECKING:
    # kopf exports no public name for its peer identity type (a NewType of str).
    from kopf._core.engines.peering import Identity


def install_digest_key(settings: settings_mod.Settings) -> None:
    """The installation's digest key, read once before anything digests referenced data. A file,
    not a read of the Secret through the API: the kubelet mounts the same Secret into every
    replica (so all agree on every hash), the operator needs no RBAC on Secrets of its own
    namespace, and the key never passes through the API client or its logs."""
    if not settings.digest_key_file:
        raise configrefs.DigestKeyError(
            "BATON_DIGEST_KEY_FILE is not set: it names the file holding the installation's digest key "
            "(the Helm chart mounts its Secret there). Outside the chart, write one key for all replicas, "
            "e.g. `head -c 48 /dev/urandom | base64 > digest.key`, and set BATON_DIGEST_KEY_FILE=digest.key")
    configrefs.install_key(configrefs.load_key(settings.digest_key_file))


def gateway(argv: list[str]) -> int:
    """`python -m baton gateway`: the data path (DESIGN.md, "Gateway"); settings from the environment."""
    # Imported here: its metrics join the registry on import, and the operator serves none of them.
    from baton.gateway import main as gateway_main

    parser = argparse.ArgumentParser(prog="baton gateway", description="Baton's gateway: holds calls through a handoff.")
    parser.add_argument("--version", action="version", version=f"baton {baton.version()}")
    parser.parse_args(argv)
    try:
        settings = settings_mod.GatewaySettings.from_env()
    except settings_mod.SettingsError as exc:
        return _bad_setting(exc)
    logs.configure(settings.log_level)
    try:
        client.load_config()
    except ValueError as exc:  # a connection setting Baton cannot honour (as for the operator)
        logs.fatal(f"baton gateway: {exc}")
        return 2
    return gateway_main.main(settings)


def _bad_setting(exc: settings_mod.SettingsError) -> int:
    # One JSON line naming the variable, before anything else runs (and before logging is set
    # up: the log level may be the bad value); exit code 2, as for a bad command line.
    logs.fatal(f"bad setting {exc}", variable=exc.variable, problem=exc.problem, version=baton.version())
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gateway"]:
        return gateway(argv[1:])
    parser = argparse.ArgumentParser(prog="baton", description="Baton: tool-runtime generations, one at a time.")
    parser.add_argument("--namespace", action="append", default=[],
                        help="watch only this namespace (repeatable; default: BATON_NAMESPACES, else all)")
    parser.add_argument("--version", action="version", version=f"baton {baton.version()}")
    args = parser.parse_args(argv)
    try:
        settings = settings_mod.Settings.from_env()
    except settings_mod.SettingsError as exc:
        return _bad_setting(exc)
    if args.namespace:
        settings = settings_mod.Settings(**{**settings.__dict__, "namespaces": tuple(args.namespace)})
    logs.configure(settings.log_level)
    try:
        client.load_config()
        install_digest_key(settings)
    except (configrefs.DigestKeyError, ValueError) as exc:
        # No digest key, or a connection setting Baton cannot honour: refused before anything connects.
        logs.fatal(f"baton: {exc}", version=baton.version())
        return 2
    try:
        # The API answers and serves both CRDs, or the process ends here with one line (kopf would
        # log a traceback and retry, and leave its sessions unclosed).
        asyncio.run(activities.preflight(settings))
    except activities.StartupError as exc:
        logs.fatal(f"startup failed: {exc}", stream=sys.stdout, version=baton.version())
        return 1
    # Read once: the fault injection (tests only) and the clock it shifts, passed down from here.
    faults = faults_mod.Faults.from_env()
    activities.install(settings, clock=faults.clock(), faults=faults)
    try:
        kopf.run(
            standalone=True,
            clusterwide=not settings.namespaces,
            namespaces=list(settings.namespaces),
            identity=cast("Identity", settings.identity),
        )
    except kopf_activities.ActivityError as exc:
        # A startup that failed inside kopf after the preflight (kopf logged the handler's error).
        cause = exc.__cause__ or exc
        logs.fatal(f"startup failed: {cause}", stream=sys.stdout, version=baton.version())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
