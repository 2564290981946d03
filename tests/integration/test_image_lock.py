"""requirements/image.lock: the image's Python dependencies, pinned with hashes.

Without a Docker engine, the proof is: the lock covers every runtime requirement of
pyproject.toml (and the build backend) with a version the requirement allows, every entry is
pinned and hashed, the image's install script uses it with --require-hashes, and pip refuses a
file whose hash differs. The install itself from the lock in a fresh venv, `pip check`, and
"installed == locked" run in test_dockerfile.py::test_build_stage_install_steps_work_in_a_fresh_venv.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "image.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The image's interpreter (Dockerfile PYTHON_IMAGE): markers are evaluated for it.
IMAGE_PYTHON = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)\.(\d+)", (ROOT / "Dockerfile").read_text(), re.M)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries() -> dict[str, tuple[str, list[str]]]:
    """{name: (version, [sha256, ...])} from the lock (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"^([A-Za-z0-9][\w.-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*$", line)
        assert m, f"not a pinned, hashed requirement: {line!r}"
        out[canonical(m.group(1))] = (m.group(2), re.findall(r"sha256:([0-9a-f]{64})", m.group(3)))
    return out


def image_environment() -> dict[str, str]:
    assert IMAGE_PYTHON, "Dockerfile: ARG PYTHON_IMAGE=python:X.Y.Z-... not found"
    env = dict(default_environment())
    env.update(python_version=IMAGE_PYTHON.group(1),
               python_full_version=f"{IMAGE_PYTHON.group(1)}.{IMAGE_PYTHON.group(2)}",
               sys_platform="linux", platform_system="Linux", os_name="posix",
               implementation_name="cpython", platform_python_implementation="CPython")
    return env


def test_every_entry_is_pinned_and_hashed() -> None:
    locked = entries()
    assert len(locked) > 10
    assert all(hashes for _, hashes in locked.values())


@pytest.mark.parametrize("source", ["dependencies", "build-system"])
def test_lock_covers_every_requirement_of_pyproject(source: str) -> None:
    reqs = PYPROJECT["project"]["dependencies"] if source == "dependencies" else PYPROJECT["build-system"]["requires"]
    locked = entries()
    env = image_environment()
    checked = 0
    for text in reqs:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate(env):
            continue
        name = canonical(req.name)
        assert name in locked, f"{req} is not in {LOCK.relative_to(ROOT)}: run hack/lock-image.sh"
        version = locked[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"{LOCK.relative_to(ROOT)} pins {name}=={version}, pyproject.toml asks {req}: run hack/lock-image.sh")
        checked += 1
    assert checked == len(reqs)


def test_image_install_uses_the_lock_with_require_hashes() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY requirements/image.lock /src/requirements/image.lock" in dockerfile
    assert "RUN sh /src/hack/image-install.sh /opt/baton /src" in dockerfile
    script = re.sub(r"\\\n\s*", " ", (ROOT / "hack" / "image-install.sh").read_text())
    pip_lines = [line.strip() for line in script.splitlines() if re.search(r"/bin/pip\" install", line)]
    assert len(pip_lines) == 2, pip_lines
    deps, own = pip_lines
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", '-r "$src/requirements/image.lock"'):
        assert flag in deps, (flag, deps)
    # Baton itself: no index and no isolated build env, so nothing outside the lock is fetched.
    for flag in ("--no-deps", "--no-build-isolation", "--no-index"):
        assert flag in own, (flag, own)
    assert re.search(r'/bin/pip" check$', script, re.M), "pip check after the install"


@pytest.mark.timeout(300)
def test_pip_refuses_a_file_whose_hash_is_not_locked(tmp_path: Path) -> None:
    """The lock's hashes are enforced: the same entry with a wrong hash is refused by pip.
    (durationpy: one small pure-Python wheel from PyPI.)"""
    version, hashes = entries()["durationpy"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}

    def install(digests: list[str]) -> subprocess.CompletedProcess[str]:
        req = tmp_path / "req.txt"
        req.write_text(f"durationpy=={version} " + " ".join(f"--hash=sha256:{h}" for h in digests) + "\n")
        return subprocess.run([*pip, "install", "--require-hashes", "--only-binary=:all:", "--no-deps",
                               "-r", str(req)], capture_output=True, text=True, timeout=240, env=env)

    wrong = install(["0" * 64])
    assert wrong.returncode != 0 and "DO NOT MATCH THE HASHES" in wrong.stderr, wrong.stdout + wrong.stderr
    right = install(hashes)
    assert right.returncode == 0, right.stdout + right.stderr
