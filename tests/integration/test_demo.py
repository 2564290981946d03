"""The README's "Try it without a cluster" on a fresh clone: `make demo` sets up everything it
needs by itself.

The repository's HEAD (committed work only) is cloned into a temporary directory: no .venv, no
.baton, no egg-info. `make demo` runs there with nothing else typed, in an environment stripped
of this test run's venv, make, kubeconfig and BATON_* variables, and with a `promtool` first on
PATH that records any call and fails (the machine may have Debian's promtool in /usr/bin; the
repository must never need one from PATH). It may reuse pip's cache, the Go caches and the
pinned tools' cache (~/.cache/baton/k8s: outside the work tree by design). It must make the venv
from pyproject.toml (kubectl comes from it), build or find the pinned tools, and run the demo end
to end: a handoff, a stuck pod held as CleanupFailed, a force recovery, everything stopped.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def fresh_env(shim_dir: Path) -> dict[str, str]:
    """The caller's environment minus everything this test run set up for itself."""
    ours = Path(sys.executable).parent
    keep_baton = {"BATON_TOOLS_CACHE"}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MAKE", "MFLAGS", "VIRTUAL_ENV", "PYTHON", "PYTEST", "KUBE", "BATON_"))
           or k in keep_baton}
    env.pop("PY", None)
    path = [d for d in env.get("PATH", "").split(os.pathsep) if d and Path(d).resolve() != ours.resolve()]
    if not shutil.which("go", path=os.pathsep.join(path)) and Path("/usr/local/go/bin/go").exists():
        path.append("/usr/local/go/bin")
    env["PATH"] = os.pathsep.join([str(shim_dir), *path])
    return env


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a venv from scratch (pip's cache may be cold) plus the demo
def test_make_demo_on_a_fresh_clone_sets_itself_up_and_passes(tmp_path: Path) -> None:
    head = git("rev-parse", "HEAD")
    clone = tmp_path / "baton"
    git("clone", "--quiet", str(ROOT), str(clone), cwd=tmp_path)
    git("checkout", "--quiet", "--detach", head, cwd=clone)
    assert not (clone / ".venv").exists()

    shims = tmp_path / "shims"
    shims.mkdir()
    called = tmp_path / "promtool-was-called"
    (shims / "promtool").write_text(f"#!/bin/sh\necho \"$@\" >> {called}\n"
                                    "echo 'promtool from PATH must not be used' >&2\nexit 127\n")
    (shims / "promtool").chmod(0o755)
    env = fresh_env(shims)

    t0 = time.monotonic()
    res = subprocess.run(["make", "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=1500)
    took = time.monotonic() - t0
    out = res.stdout + res.stderr
    print(f"make demo on a fresh clone of {head[:12]}: {took:.0f} s, exit {res.returncode}")
    assert res.returncode == 0, out[-4000:]

    assert "venv: installing .venv from pyproject.toml" in out, "make demo did not make the venv"
    assert (clone / ".venv" / "bin" / "kubectl").exists(), "kubectl did not come from the venv"
    for needle in ("== 1. a first ToolRuntime", "Handoff g1→g2 (TemplateChanged)", "PodStuckTerminating",
                   "force recovery of generation 2 requested", "ForceRecovered", "== demo done",
                   "[cluster] stopped"):
        assert needle in out, f"{needle!r} missing from the demo's output:\n{out[-4000:]}"
    assert not (clone / ".baton" / "demo" / "pids").exists(), "the demo's plane was not stopped"
    assert not called.exists(), f"promtool from PATH was called: {called.read_text()}"

    # The venv is a real prerequisite: up to date now, out of date once pyproject.toml changes.
    assert subprocess.run(["make", "-q", "venv"], cwd=clone, env=env, timeout=60).returncode == 0
    (clone / "pyproject.toml").touch()
    assert subprocess.run(["make", "-q", "venv"], cwd=clone, env=env, timeout=60).returncode == 1, \
        "a changed pyproject.toml does not re-install the venv"
    shutil.rmtree(clone, ignore_errors=True)
