"""The plugin's exact output, byte for byte, for every verb and output format, its refusals and
API errors, and every verb's --help: what `kubectl baton` prints is an interface (scripts parse
the json/yaml, people read the text).

The expected outputs (golden.json) were recorded from the plugin as it was before it
became a package (ff14dbd's baton/cli.py); a refactor must not change them. The API server is a
fake CustomObjectsApi behind a real kubeconfig, so connect() runs as it does against a cluster.
"""
from __future__ import annotations

import datetime
import io
import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from baton import cli
from baton.cli import cluster, render

GOLDEN = json.loads((Path(__file__).parent / "golden.json").read_text())
NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


def _rt(name: str, namespace: str = "agents", *, status: dict[str, Any] | None = None, suspend: bool = False,
        created: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "7", "uid": f"rt-{name}"}
    if created is not None:
        meta["creationTimestamp"] = created
    return {"apiVersion": "baton.dev/v1alpha1", "kind": "ToolRuntime", "metadata": meta,
            "spec": {"suspend": suspend}, "status": status or {}}


READY = {"observedGeneration": 4, "fencingToken": 9, "latestGeneration": 3, "holder": "op-a",
         "current": {"generation": 3, "pod": "search", "uid": "u3", "templateHash": "h3",
                     "startedAt": "2026-11-30T11:00:00Z", "readySince": "2026-11-30T11:00:05Z"},
         "history": [{"generation": 1, "pod": "search", "uid": "u1", "startedAt": "2026-11-28T10:00:00Z",
                      "retiredAt": "2026-11-29T10:00:00Z", "outcome": "Retired", "message": "template changed"},
                     {"generation": 2, "pod": "search", "uid": "u2", "startedAt": "2026-11-29T10:00:00Z",
                      "retiredAt": "2026-11-30T11:00:00Z", "outcome": "Reset"}],
         "conditions": [{"type": "Ready", "status": "True", "reason": "GenerationReady",
                         "message": "generation 3 ready", "lastTransitionTime": "2026-11-30T11:00:05Z"},
                        {"type": "Progressing", "status": "False", "reason": "Idle"},
                        {"type": "CleanupFailed", "status": "False", "reason": "Clean"},
                        {"type": "SomeoneElses", "status": "Unknown"}]}
STUCK = {"fencingToken": 4, "holder": "op-b",
         "current": None,
         "transition": {"kind": "Handoff", "from": 2, "to": 3, "step": "AwaitingPodGone", "trigger": "TemplateChanged",
                        "startedAt": "2026-11-30T11:50:00Z", "stepStartedAt": "2026-11-30T11:55:00Z",
                        "deadline": "2026-11-30T11:59:30Z"},
         "lastCleanupFailure": {"generation": 2, "pod": "search", "uid": "u2", "reason": "PodStuckTerminating",
                                "message": "still there", "at": "2026-11-30T11:58:00Z"},
         "history": [{"generation": 1, "outcome": "Retired"}],
         "conditions": [{"type": "Ready", "status": "False", "reason": "CleanupFailed", "message": "pod stuck"},
                        {"type": "CleanupFailed", "status": "True", "reason": "PodStuckTerminating"}]}
# A newer operator's values this plugin does not know, and a transition still ahead of its deadline.
NEWER = {"current": {"generation": 5, "pod": "future", "uid": "u5", "templateHash": "h5"},
         "transition": {"kind": "Teleport", "from": 5, "to": None, "step": "Dematerializing", "trigger": "Whim",
                        "deadline": "2026-11-30T12:01:00Z"},
         "conditions": [{"type": "Ready", "status": "True", "reason": "SomethingNew"}]}

RENDER_CASES: dict[str, Callable[[], str]] = {
    "status_text READY": lambda: render.status_text(_rt("search", status=READY), now=NOW),
    "status_text STUCK": lambda: render.status_text(_rt("search", status=STUCK), now=NOW),
    "status_text NEWER": lambda: render.status_text(_rt("future", status=NEWER), now=NOW),
    "status_text empty": lambda: render.status_text(_rt("fresh"), now=NOW),
    "history_text READY": lambda: render.history_text(_rt("search", status=READY)),
    "history_text STUCK": lambda: render.history_text(_rt("search", status=STUCK)),
    "history_text empty": lambda: render.history_text(_rt("fresh")),
    "render json": lambda: render.render(render.history_entries(_rt("search", status=READY)), output="json"),
    "render yaml": lambda: render.render(render.history_entries(_rt("search", status=READY)), output="yaml"),
}


@pytest.mark.parametrize("case", sorted(RENDER_CASES))
def test_render_is_byte_identical(case: str) -> None:
    assert RENDER_CASES[case]() == GOLDEN["render"][case]


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """As decoded from the wire: no object shared between two answers."""
    copied: dict[str, Any] = json.loads(json.dumps(obj))
    return copied


def _timeless(status: dict[str, Any]) -> dict[str, Any]:
    """Without the transition's deadline: the verbs compare it with the real clock."""
    return {**status, "transition": {k: v for k, v in status["transition"].items() if k != "deadline"}}


CRD = yaml.safe_load((Path(__file__).parents[3] / "crds" / "baton.dev_toolruntimes.yaml").read_text())
COLUMNS = CRD["spec"]["versions"][0]["additionalPrinterColumns"]


def _jsonpath(obj: Any, path: str) -> Any:
    """The two shapes of JSONPath the CRD's printer columns use: `.a.b` and
    `.status.conditions[?(@.type=="Ready")].field` (checked: anything else fails the test)."""
    cur = obj
    for part in re.findall(r'\.([A-Za-z]+)|\[\?\(@\.type=="(\w+)"\)\]', path):
        key, cond = part
        if cond:
            cur = next((c for c in cur or [] if c.get("type") == cond), None)
        else:
            cur = cur.get(key) if isinstance(cur, dict) else None
    return cur


def table_of(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What the API server answers a list with Accept: as=Table: the Name column, the CRD's printer
    columns (a date as the age the server computes: "7d" for every row here, "<unknown>" without a
    creationTimestamp, as translateTimestampSince says), each row with its object's metadata."""
    columns = [{"name": "Name", "type": "string", "format": "name", "priority": 0},
               *[{"name": c["name"], "type": c["type"], "format": "", "priority": c.get("priority", 0)} for c in COLUMNS]]
    rows = []
    for o in items:
        cells = [o["metadata"]["name"]]
        for c in COLUMNS:
            value = _jsonpath(o, c["jsonPath"])
            if c["type"] == "date":
                value = "7d" if value else "<unknown>"
            cells.append(value)
        rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata", "metadata": o["metadata"]}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": columns, "rows": rows}


class FakeApi:
    """The API server behind the plugin's Transport (baton.cli.cluster, our own boundary): the
    requests the plugin sends, answered over a dict of objects; records what it was asked, as
    ("get"|"list"|"patch", group, version, namespace, plural, name or fieldSelector[, body])."""

    objects: dict[tuple[str, str], dict[str, Any]] = {}
    calls: list[tuple[Any, ...]] = []
    timeouts: list[float | None] = []  # each request's timeout
    content_types: list[str | None] = []  # each patch's Content-Type
    accepts: list[str] = []  # each list's Accept
    fail_patch: int | None = None
    crd_missing = False
    kubeconfig = ""  # its path, for --kubeconfig

    def __init__(self, creds: Any, *, timeout: float | None, impersonate: Any) -> None:
        self.timeout = timeout

    @classmethod
    def _not_found(cls, name: str | None) -> cluster.ApiException:
        details = {} if name is None else {"name": name, "group": "baton.dev", "kind": "toolruntimes"}
        return cluster.ApiException(404, "Not Found", json.dumps({"kind": "Status", "message": "not found",
                                                                  "details": details}))

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
                content_type: str = "application/merge-patch+json", accept: str = "application/json") -> Any:
        self.timeouts.append(self.timeout)
        m = re.fullmatch(r"/apis/([^/]+)/([^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", path)
        assert m, path
        group, version, namespace, plural, name = m.groups()
        query = dict(query or {})
        if self.crd_missing:
            raise self._not_found(None)
        if method == "GET" and name is not None:
            self.calls.append(("get", group, version, namespace, plural, name))
            if (namespace, name) not in self.objects:
                raise self._not_found(name)
            return _copy(self.objects[(namespace, name)])
        if method == "GET":
            selector = query.pop("fieldSelector", None)
            # A list in kubectl's pages of 500 (one here); the hint's lookup by name needs none.
            assert query.pop("limit", None) == (None if selector else "500") and not query.pop("continue", None)
            assert not query, query
            self.calls.append(("list", group, version, namespace, plural, selector))
            self.accepts.append(accept)
            wanted = None if selector is None else selector.split("=", 1)[1]
            items = [_copy(o) for (ns, n), o in sorted(self.objects.items())
                     if namespace in (None, ns) and wanted in (None, n)]
            if accept == cluster.TABLE:
                return table_of(items)
            return {"kind": "ToolRuntimeList", "metadata": {}, "items": items}
        assert method == "PATCH" and name is not None
        self.content_types.append(content_type)
        self.calls.append(("patch", group, version, namespace, plural, name, body))
        if self.fail_patch is not None:
            raise cluster.ApiException(self.fail_patch, "Conflict",
                                       json.dumps({"kind": "Status", "message": "the object has been modified"}))
        return self.objects[(namespace, name)]


def install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> type[FakeApi]:
    monkeypatch.setattr(cluster, "Transport", FakeApi)
    monkeypatch.setattr(FakeApi, "calls", [])
    monkeypatch.setattr(FakeApi, "timeouts", [])
    monkeypatch.setattr(FakeApi, "content_types", [])
    monkeypatch.setattr(FakeApi, "accepts", [])
    monkeypatch.setattr(FakeApi, "fail_patch", None)
    monkeypatch.setattr(FakeApi, "crd_missing", False)
    monkeypatch.setattr(FakeApi, "objects", {
        ("agents", "search"): _rt("search", status=READY),
        ("agents", "stuck"): _rt("stuck", status=_timeless(STUCK)),
        ("agents", "paused"): _rt("paused", status=READY, suspend=True),
        ("ops", "future"): _rt("future", "ops", status=_timeless(NEWER)),
    })
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "agents"}}],
    }))
    monkeypatch.setattr(FakeApi, "kubeconfig", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return FakeApi


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> type[FakeApi]:
    return install(monkeypatch, tmp_path)


VERB_CASES = [
    *[[*argv, "-o", output] for output in ("text", "json", "yaml") for argv in (
        ["list"], ["list", "-A"], ["list", "-n", "empty"], ["status", "search"], ["status", "stuck"],
        ["history", "search"], ["history", "stuck"], ["reset", "search"], ["force-recover", "stuck", "--yes"])],
    ["list", "-A"], ["status", "future", "-n", "ops"],
    ["status", "future"], ["status", "nothere"], ["reset", "stuck"], ["reset", "paused"],
    ["reset", "future", "-n", "ops"], ["force-recover", "search", "--yes"], ["force-recover", "stuck"],
]


def _key(argv: list[str]) -> str:
    return " ".join(argv)


@pytest.mark.parametrize("argv", VERB_CASES, ids=_key)
def test_verbs_are_byte_identical(api: type[FakeApi], argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*argv, "--kubeconfig", api.kubeconfig], stdin=io.StringIO(), stdout=out, stderr=err)
    assert [code, out.getvalue(), err.getvalue()] == GOLDEN["verbs"][_key(argv)]
    # The names the API calls carry: baton.model.names' now, the same strings as before.
    assert {c[1:3] + c[4:5] for c in api.calls} <= {("baton.dev", "v1alpha1", "toolruntimes")}


def test_annotations_written(api: type[FakeApi]) -> None:
    assert cli.main(["reset", "search", "--kubeconfig", api.kubeconfig], stdout=io.StringIO()) == 0
    assert cli.main(["force-recover", "stuck", "--yes", "--kubeconfig", api.kubeconfig], stdout=io.StringIO()) == 0
    assert [c[-1] for c in api.calls if c[0] == "patch"] == [
        {"metadata": {"annotations": {"baton.dev/reset": "3"}, "resourceVersion": "7"}},
        {"metadata": {"annotations": {"baton.dev/force-recovery": "2"}, "resourceVersion": "7"}}]


@pytest.mark.parametrize("failure", ["conflict", "crd missing"])
def test_api_errors_are_byte_identical(api: type[FakeApi], failure: str) -> None:
    if failure == "conflict":
        api.fail_patch = 409
    else:
        api.crd_missing = True
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["reset", "search", "--kubeconfig", api.kubeconfig], stdin=io.StringIO(), stdout=out, stderr=err)
    assert [code, out.getvalue(), err.getvalue()] == GOLDEN["errors"][failure]


@pytest.mark.parametrize("verb", [None, "list", "status", "history", "reset", "force-recover", "suspend", "resume",
                                  "force-retire", "retry", "wake", "release", "completion", "version"])
def test_help_is_byte_identical(verb: str | None, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"] if verb is None else [verb, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == GOLDEN["help"][str(verb)]



def test_release_removes_only_batons_finalizer_and_retries_a_conflict(api: type[FakeApi]) -> None:
    api.objects[("agents", "search")]["metadata"]["finalizers"] = ["example.com/keep", "baton.dev/retire"]
    api.objects[("agents", "stuck")]["metadata"]["finalizers"] = ["baton.dev/retire"]
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["release", "--yes", "--kubeconfig", api.kubeconfig], stdin=io.StringIO(), stdout=out,
                    stderr=err) == 0, err.getvalue()
    assert out.getvalue() == "toolruntime agents/search released\ntoolruntime agents/stuck released\n"
    assert [c[5:] for c in api.calls if c[0] == "patch"] == [
        ("search", {"metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "7"}}),
        ("stuck", {"metadata": {"finalizers": [], "resourceVersion": "7"}})]
    # Without a terminal and without --yes: refused, nothing written.
    api.calls.clear()
    err = io.StringIO()
    assert cli.main(["release", "-A", "--kubeconfig", api.kubeconfig], stdin=io.StringIO(), stdout=io.StringIO(),
                    stderr=err) == 1
    assert "pass --yes" in err.getvalue() and not [c for c in api.calls if c[0] == "patch"]
    # A conflict: read again and tried again, then reported in one line after five tries.
    api.fail_patch = 409
    err = io.StringIO()
    assert cli.main(["release", "stuck", "--yes", "--kubeconfig", api.kubeconfig], stdin=io.StringIO(),
                    stdout=io.StringIO(), stderr=err) == 1
    assert len([c for c in api.calls if c[0] == "patch"]) == 5
    assert err.getvalue() == "error: the toolruntime changed while this ran; try again\n"


PINNED = {**READY, "current": None,
          "transition": {"kind": "Handoff", "from": 3, "to": 4, "step": "StoppingAdmission", "trigger": "TemplateChanged",
                         "pinWaitSince": "2026-11-30T11:50:00Z"},
          "conditions": [{"type": "RetirementBlocked", "status": "True", "reason": "PinnedPastBudget"}]}


def test_suspend_resume_write_one_merge_patch_once(api: type[FakeApi]) -> None:
    """suspend/resume: a merge patch of spec.suspend, and none when it already has that value."""
    run = lambda *argv: _run_verb(api, *argv)  # noqa: E731
    assert run("suspend", "search") == (0, "toolruntime/search suspended: generation 3 retires within its budgets "
                                           "(drainSeconds=30; a generation pinned by ToolRuntimeClaims waits for "
                                           "them first, at most pinSeconds=600), and none starts until "
                                           "`kubectl baton resume search`\n", "")
    assert run("suspend", "paused") == (0, "toolruntime/paused is already suspended: nothing changed\n", "")
    assert run("resume", "paused") == (0, "toolruntime/paused resumed: a new generation starts\n", "")
    assert run("resume", "search") == (0, "toolruntime/search is already running (not suspended): nothing changed\n", "")
    code, out, _ = run("resume", "paused", "-o", "json")
    assert code == 0 and json.loads(out) == {
        "kind": "ToolRuntime", "namespace": "agents", "name": "paused", "verb": "resume", "spec": {"suspend": False},
        "changed": True, "message": "toolruntime/paused resumed: a new generation starts"}
    patches = [(c[5], c[-1]) for c in api.calls if c[0] == "patch"]
    assert patches == [("search", {"spec": {"suspend": True}}), ("paused", {"spec": {"suspend": False}}),
                       ("paused", {"spec": {"suspend": False}})]
    assert api.content_types == ["application/merge-patch+json"] * 3


def test_force_retire_writes_the_annotation_or_refuses(api: type[FakeApi]) -> None:
    api.objects[("agents", "pinned")] = _rt("pinned", status=PINNED)
    code, out, err = _run_verb(api, "force-retire", "pinned", "--generation", "3")
    assert (code, err) == (0, "")
    assert out == ("toolruntime/pinned: force-retire of generation 3 requested (RetirementBlocked): it retires past "
                   "its pins, recorded in its history\n")
    assert _run_verb(api, "force-retire", "pinned", "--generation", "2") == (1, "", (
        "error: toolruntime 'pinned': generation 2 is not the one waiting for pins; generation 3 is "
        "(Handoff g3 -> g4 at StoppingAdmission): use --generation 3\n"))
    assert _run_verb(api, "force-retire", "search", "--generation", "3") == (1, "", (
        "error: toolruntime 'search' has no transition: no retire waits for pins, nothing to force-retire\n"))
    code, _, err = _run_verb(api, "force-retire", "stuck", "--generation", "2")
    assert code == 1 and err == ("error: toolruntime 'stuck': no retire waits for pins "
                                 "(Handoff g2 -> g3 at AwaitingPodGone), nothing to force-retire\n")
    assert [c[-1] for c in api.calls if c[0] == "patch"] == [
        {"metadata": {"annotations": {"baton.dev/force-retire": "3"}, "resourceVersion": "7"}}]


@pytest.mark.parametrize("flag, timeout", [([], 30.0), (["--request-timeout", "1m"], 60.0),
                                           (["--request-timeout", "0"], None), (["--request-timeout", "5"], 5.0)])
def test_request_timeout_reaches_every_request(api: type[FakeApi], flag: list[str],
                                               timeout: float | None) -> None:
    assert _run_verb(api, "suspend", "search", *flag)[0] == 0
    assert _run_verb(api, "status", "nothere", *flag)[0] == 1  # a get, then the list for the hint
    assert len(api.timeouts) == 4 and set(api.timeouts) == {timeout}


def _run_verb(api: type[FakeApi], *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([*argv, "--kubeconfig", api.kubeconfig], stdin=io.StringIO(), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()
