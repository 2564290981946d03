"""The kubectl plugin without a cluster: formatting, refusals, confirmation, arguments, and the
errors for a missing kubeconfig or an API server that does not answer (a closed 127.0.0.1 port)."""
from __future__ import annotations

import datetime
import io
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import baton
from baton import cli
from baton.cli import cluster, render, requests
from baton.cli.main import parser

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


def _rt(name: str = "search", namespace: str = "agents", *, status: dict[str, Any] | None = None,
        suspend: bool = False, created: str = "2026-11-27T11:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7", "creationTimestamp": created},
            "spec": {"suspend": suspend}, "status": status or {}}


READY = {"current": {"generation": 3, "pod": "search", "uid": "u3", "startedAt": "2026-11-30T11:00:00Z"},
         "history": [{"generation": 2, "pod": "search", "uid": "u2", "startedAt": "2026-11-29T10:00:00Z",
                      "retiredAt": "2026-11-30T11:00:00Z", "outcome": "Reset"}],
         "conditions": [{"type": "Ready", "status": "True", "reason": "GenerationReady"},
                        {"type": "CleanupFailed", "status": "False", "reason": "Clean"}]}
STUCK = {"current": None,
         "transition": {"kind": "Handoff", "from": 2, "to": 3, "step": "AwaitingPodGone",
                        "deadline": "2026-11-30T11:59:30Z", "trigger": "TemplateChanged"},
         "lastCleanupFailure": {"generation": 2, "pod": "search", "uid": "u2", "reason": "PodStuckTerminating",
                                "message": "still there", "at": "2026-11-30T11:58:00Z"},
         "conditions": [{"type": "Ready", "status": "False", "reason": "CleanupFailed"},
                        {"type": "CleanupFailed", "status": "True", "reason": "PodStuckTerminating"}]}


def test_history_and_status_text() -> None:
    rt = _rt(status=READY)
    entries = render.history_entries(rt)
    assert [(e["generation"], e["outcome"]) for e in entries] == [(2, "Reset"), (3, "Current")]
    lines = render.history_text(rt).splitlines()
    assert lines[0].split() == ["GENERATION", "POD", "UID", "STARTED", "RETIRED", "OUTCOME"]
    assert lines[2].split()[-1] == "Current" and lines[2].split()[4] == "-"
    text = render.status_text(_rt(status=STUCK), now=NOW)
    assert "transition: Handoff g2 -> g3 (TemplateChanged), step AwaitingPodGone" in text
    assert "(30s past)" in text and "last cleanup failure: generation 2 pod search" in text


def test_reset_request_and_its_refusals() -> None:
    req = requests.reset_request(_rt(status=READY))
    assert (req.annotation, req.generation) == ("baton.dev/reset", 3)
    assert req.as_data(_rt(status=READY), verb="reset") == {
        "kind": "ToolRuntime", "namespace": "agents", "name": "search", "verb": "reset",
        "annotations": {"baton.dev/reset": "3"}, "generation": 3,
        "message": "toolruntime/search: reset of generation 3 requested"}
    with pytest.raises(requests.Refused, match="is suspended"):
        requests.reset_request(_rt(status=READY, suspend=True))
    with pytest.raises(requests.Refused, match="no current generation"):
        requests.reset_request(_rt(status={}))
    with pytest.raises(requests.Refused, match="in a transition"):
        requests.reset_request(_rt(status={**READY, "transition": STUCK["transition"]}))


def test_force_recovery_request_and_its_refusal() -> None:
    req = requests.force_recovery_request(_rt(status=STUCK))
    assert (req.annotation, req.generation, req.abandons) == ("baton.dev/force-recovery", 2,
                                                            {"pod": "search", "uid": "u2"})
    with pytest.raises(requests.Refused, match=r"no cleanup failure .*CleanupFailed=False, reason Clean"):
        requests.force_recovery_request(_rt(status=READY))


@pytest.fixture
def terminal() -> Iterator[tuple[Any, int]]:
    """A real pseudo-terminal: (the plugin's stdin, the keyboard's fd)."""
    keyboard, tty = os.openpty()
    stdin = os.fdopen(tty, "r")
    try:
        yield stdin, keyboard
    finally:
        stdin.close()
        os.close(keyboard)


@pytest.mark.parametrize("answer, goes_ahead", [("y\n", True), ("yes\n", True), ("n\n", False), ("\n", False)])
def test_confirm_asks_on_a_terminal(terminal: tuple[Any, int], answer: str, goes_ahead: bool) -> None:
    stdin, keyboard = terminal
    assert stdin.isatty()
    os.write(keyboard, answer.encode())
    err = io.StringIO()
    if goes_ahead:
        requests.confirm("Abandon pod x?", yes=False, stdin=stdin, stderr=err)
    else:
        with pytest.raises(requests.Refused, match="not confirmed: nothing changed"):
            requests.confirm("Abandon pod x?", yes=False, stdin=stdin, stderr=err)
    assert err.getvalue() == "Abandon pod x? [y/N] "


def test_confirm_without_a_terminal_needs_yes() -> None:
    err = io.StringIO()
    with pytest.raises(requests.Refused, match="not a terminal.*--yes"):
        requests.confirm("Abandon?", yes=False, stdin=io.StringIO("y\n"), stderr=err)
    assert err.getvalue() == ""  # nothing asked, nothing read
    requests.confirm("Abandon?", yes=True, stdin=io.StringIO(""), stderr=err)
    assert err.getvalue() == ""


@pytest.mark.parametrize("verb", ["list", "status", "history", "reset", "force-recover", "suspend", "resume",
                                  "force-retire", "retry", "release", "version"])
def test_every_verb_has_its_own_help(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([verb, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: kubectl baton {verb} ")
    assert "-o {text,json,yaml}" in out and "--kubeconfig" in out
    assert ("--all-namespaces" in out) == (verb in ("list", "release"))
    assert ("--yes" in out) == (verb in ("force-recover", "release"))


def test_flags_before_or_after_the_name() -> None:
    p = parser()
    a = p.parse_args(["status", "-n", "agents", "search", "-o", "yaml", "--kubeconfig", "/k"])
    b = p.parse_args(["status", "search", "--kubeconfig", "/k", "-o", "yaml", "--namespace", "agents"])
    assert vars(a) == vars(b) == {"verb": "status", "namespace": "agents", "name": "search", "output": "yaml",
                                  "kubeconfig": "/k"}
    assert vars(p.parse_args(["list", "-A"])) == {"verb": "list", "all_namespaces": True}


@pytest.mark.parametrize("argv", [["frobnicate", "x"], ["status"], ["list", "-o", "wide"], ["reset", "x", "-A"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["text", "json", "yaml"])
def test_version(output: str) -> None:
    out = io.StringIO()
    assert cli.main(["version", "-o", output], stdout=out) == 0
    if output == "text":
        assert out.getvalue() == f"kubectl-baton {baton.version()}\n"
    else:
        loaded = json.loads(out.getvalue()) if output == "json" else yaml.safe_load(out.getvalue())
        assert loaded == {"name": "kubectl-baton", "version": baton.version()}


def _api_error(status: int, reason: str, body: dict[str, Any] | str) -> cluster.ApiException:
    return cluster.ApiException(status, reason, body if isinstance(body, str) else json.dumps(body))


def test_api_errors_are_explained() -> None:
    forbidden = _api_error(403, "Forbidden", {"kind": "Status", "message": 'toolruntimes.baton.dev "x" is forbidden'})
    assert cluster.explain_api_error(forbidden) == 'Forbidden: toolruntimes.baton.dev "x" is forbidden'
    no_crd = _api_error(404, "Not Found", {"kind": "Status", "message": "the server could not find the requested resource",
                                            "details": {}})
    assert "is Baton's CRD installed?" in cluster.explain_api_error(no_crd)
    assert "is Baton's CRD installed?" in cluster.explain_api_error(_api_error(404, "Not Found", "404 page not found"))
    conflict = _api_error(409, "Conflict", {"kind": "Status", "message": "the object has been modified"})
    assert cluster.explain_api_error(conflict) == "the toolruntime changed while this ran; try again"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "agents"}}],
    }))
    return path


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    try:
        os.environ.pop("KUBERNETES_SERVICE_HOST", None)
        os.environ.update(env or {})
        code = cli.main(argv, stdin=io.StringIO(), stdout=out, stderr=err)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def test_missing_kubeconfig_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    code, out, err = _run(["list", "--kubeconfig", str(missing)])
    assert (code, out) == (1, "")
    assert err == f"error: no kubeconfig: {missing} does not exist (pass --kubeconfig, or set KUBECONFIG)\n"
    code, out, err = _run(["status", "x"], env={"KUBECONFIG": str(missing), "HOME": str(tmp_path)})
    assert (code, err) == (1, f"error: no kubeconfig: {missing} does not exist (pass --kubeconfig, or set KUBECONFIG)\n")


def test_broken_kubeconfig_is_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "kc"
    bad.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    code, out, err = _run(["list", "--kubeconfig", str(bad)])
    assert code == 1 and out == ""
    assert err.startswith(f"error: invalid kubeconfig {bad}: ") and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["list"], ["list", "-A"], ["status", "x"], ["history", "x"], ["reset", "x"],
                                  ["force-recover", "x", "--yes"]])
def test_unreachable_server_is_one_error_line(tmp_path: Path, argv: list[str]) -> None:
    server = f"https://127.0.0.1:{_closed_port()}"
    kc = _kubeconfig(tmp_path / "kc", server)
    code, out, err = _run([*argv, "--kubeconfig", str(kc)])
    assert (code, out, err) == (1, "", f"error: cannot reach the API server {server}: Connection refused\n")


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    """The installed `kubectl-baton` (what `kubectl baton` runs), as a process."""
    script = Path(sys.executable).parent / "kubectl-baton"
    assert script.exists(), "pip install -e . installs the console script"
    server = f"https://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(_kubeconfig(tmp_path / "kc", server))
    res = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=60, env=env)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"error: cannot reach the API server {server}: Connection refused\n")
    env["KUBECONFIG"] = str(tmp_path / "missing")
    res = subprocess.run([str(script), "status", "x"], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1 and res.stderr.startswith("error: no kubeconfig: ") and "Traceback" not in res.stderr


@pytest.mark.parametrize("text, seconds", [
    ("30s", 30.0), ("1m", 60.0), ("1m30s", 90.0), ("1h", 3600.0), ("500ms", 0.5), ("1.5s", 1.5), ("30", 30.0),
    ("2.5", 2.5), ("0", None), ("0s", None), ("0m0s", None),
])
def test_request_timeout_takes_kubectls_forms(text: str, seconds: float | None) -> None:
    assert requests.parse_duration(text) == seconds
    assert getattr(parser().parse_args(["list", "--request-timeout", text]), "request_timeout") == seconds


@pytest.mark.parametrize("text", ["", "abc", "30x", "s", "-1", "1m 30s", "30s5", "1.2.3s"])
def test_bad_request_timeout_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        requests.parse_duration(text)
    with pytest.raises(SystemExit) as exc:
        cli.main(["list", "--request-timeout", text])
    assert exc.value.code == 2
    assert "argument --request-timeout: invalid duration" in capsys.readouterr().err


def test_impersonation_and_force_retire_arguments() -> None:
    args = parser().parse_args(["force-retire", "search", "--as", "alice", "--generation", "3",
                                "--as-group", "ops", "--as-group", "oncall", "--context", "prod"])
    assert vars(args) == {"verb": "force-retire", "name": "search", "generation": 3, "as_user": "alice",
                          "as_groups": ["ops", "oncall"], "context": "prod"}
    assert vars(parser().parse_args(["suspend", "search", "-n", "agents"])) == {
        "verb": "suspend", "name": "search", "namespace": "agents"}


@pytest.mark.parametrize("argv", [["force-retire", "x"], ["force-retire", "x", "--generation", "0"],
                                  ["force-retire", "x", "--generation", "two"], ["suspend"], ["resume", "x", "-A"]])
def test_new_verbs_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err


class _Recorder:
    """A plain-HTTP API server on 127.0.0.1 that answers every request with an empty Table (or not
    at all), keeping each request's raw header lines."""

    def __init__(self, *, answer: bool) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.answer = answer
        self.requests: list[list[str]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(30)
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.requests.append(data.split(b"\r\n\r\n")[0].decode().split("\r\n")[1:])
            if not self.answer:
                try:
                    conn.recv(1)  # until the client gives up and closes (or 30 s)
                except OSError:
                    pass
                return
            body = b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":[],"rows":[]}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=35)


def test_as_and_as_group_send_one_header_each(tmp_path: Path) -> None:
    server = _Recorder(answer=True)
    try:
        kc = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}")
        code, out, err = _run(["list", "--kubeconfig", str(kc), "--as", "alice",
                               "--as-group", "ops", "--as-group", "system:authenticated"])
    finally:
        server.close()
    assert (code, out, err) == (0, "", "No resources found in agents namespace.\n")
    [headers] = server.requests
    lowered = [h.lower() for h in headers]
    assert "accept: application/json;as=table;v=v1;g=meta.k8s.io,application/json" in lowered
    assert "impersonate-user: alice" in lowered
    assert [h for h in lowered if h.startswith("impersonate-group:")] == [
        "impersonate-group: ops", "impersonate-group: system:authenticated"]


def test_no_impersonation_headers_without_as(tmp_path: Path) -> None:
    server = _Recorder(answer=True)
    try:
        code, _, _ = _run(["list", "--kubeconfig", str(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}"))])
    finally:
        server.close()
    assert code == 0 and not [h for h in server.requests[0] if h.lower().startswith("impersonate-")]


def test_as_group_needs_as(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{_closed_port()}")
    assert _run(["list", "--kubeconfig", str(kc), "--as-group", "ops"]) == (
        1, "", "error: requesting groups (--as-group) without impersonating a user (--as)\n")


def test_request_timeout_gives_up_on_a_silent_server(tmp_path: Path) -> None:
    server = _Recorder(answer=False)
    try:
        kc = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{server.port}")
        code, out, err = _run(["list", "--kubeconfig", str(kc), "--request-timeout", "1s"])
    finally:
        server.close()
    assert (code, out, err) == (1, "", f"error: cannot reach the API server http://127.0.0.1:{server.port}: timed out\n")


def _complete(words: list[str]) -> list[str]:
    """What bash offers after `kubectl-baton WORDS` (the last word being completed), with the
    script `kubectl baton completion bash` prints."""
    out = io.StringIO()
    assert cli.main(["completion", "bash"], stdout=out) == 0
    line = ["kubectl-baton", *words]
    shell = (out.getvalue() + "\nCOMP_WORDS=(" + " ".join(f"'{w}'" for w in line) + f")\nCOMP_CWORD={len(line) - 1}\n"
             '_kubectl_baton\nprintf "%s\\n" "${COMPREPLY[@]}"\n')
    res = subprocess.run(["bash", "--norc", "--noprofile", "-c", shell], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"})  # no kubectl on PATH: only the script's own words
    assert res.returncode == 0, res.stderr
    return [w for w in res.stdout.splitlines() if w]


def test_bash_completion_offers_verbs_flags_and_formats() -> None:
    assert _complete([""]) == ["list", "status", "history", "reset", "force-recover", "suspend", "resume",
                               "force-retire", "retry", "wake", "release", "completion", "version"]
    assert _complete(["force-r"]) == ["force-recover", "force-retire"]
    assert _complete(["force-retire", "search", "--g"]) == ["--generation"]
    assert _complete(["suspend", "-n", "agents", "search", "--as"]) == ["--as", "--as-group"]
    assert _complete(["list", "-o", ""]) == ["text", "json", "yaml"]
    assert _complete(["list", "--kubeconfig", "/k", "-o", "y"]) == ["yaml"]
    assert _complete(["completion", ""]) == ["bash", "zsh"]
    assert "-A" not in _complete(["suspend", "-"]) and "-A" in _complete(["list", "-"])
    assert _complete(["force-retire", "x", "--generation", ""]) == []  # a number: nothing to offer


def test_zsh_completion_runs_the_same_function_through_bashcompinit() -> None:
    bash, zsh = io.StringIO(), io.StringIO()
    assert cli.main(["completion", "bash"], stdout=bash) == 0 and cli.main(["completion", "zsh"], stdout=zsh) == 0
    assert "autoload -U +X bashcompinit && bashcompinit\n_kubectl_baton() {" in zsh.getvalue()
    assert zsh.getvalue().split("_kubectl_baton() {", 1)[1] == bash.getvalue().split("_kubectl_baton() {", 1)[1]
    assert zsh.getvalue().rstrip().endswith("complete -F _kubectl_baton kubectl-baton")


def test_a_reader_gone_is_no_traceback() -> None:
    """`kubectl baton version | head -0`: the pipe's reader is gone before the plugin writes."""
    script = Path(sys.executable).parent / "kubectl-baton"
    read, write = os.pipe()
    os.close(read)
    try:
        res = subprocess.run([str(script), "version"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (res.returncode, res.stderr) == (1, "")


class _ConnectProxy:
    """An HTTP CONNECT proxy on 127.0.0.1 for one tunnel, keeping the CONNECT line it was sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = int(self.sock.getsockname()[1])
        self.connects: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(30)
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            line = data.split(b"\r\n")[0].decode()
            self.connects.append(line)
            host, port = line.split()[1].rsplit(":", 1)
            assert host == "127.0.0.1", host  # only loopback is ever dialled
            with socket.create_connection((host, int(port)), timeout=30) as upstream:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                upstream.settimeout(30)

                def pump(src: socket.socket, dst: socket.socket) -> None:
                    try:
                        while chunk := src.recv(65536):
                            dst.sendall(chunk)
                    except OSError:
                        pass
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                back = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
                back.start()
                pump(conn, upstream)
                back.join(timeout=30)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=35)


def test_proxy_url_tunnels_to_the_server(tmp_path: Path) -> None:
    server, proxy = _Recorder(answer=True), _ConnectProxy()
    try:
        kc = tmp_path / "kc"
        doc = yaml.safe_load(_kubeconfig(kc, f"http://127.0.0.1:{server.port}").read_text())
        doc["clusters"][0]["cluster"]["proxy-url"] = f"http://127.0.0.1:{proxy.port}"
        kc.write_text(yaml.safe_dump(doc))
        code, out, err = _run(["list", "--kubeconfig", str(kc)])
    finally:
        server.close()
        proxy.close()
    assert (code, out, err) == (0, "", "No resources found in agents namespace.\n")
    assert [c.rsplit(" ", 1)[0] for c in proxy.connects] == [f"CONNECT 127.0.0.1:{server.port}"]  # http.client: HTTP/1.0
    [headers] = server.requests
    assert "authorization: bearer t" in [h.lower() for h in headers]
