"""Digests of referenced config (issue 23 item 4), with operator processes run for real.

- Nothing Baton writes carries an unkeyed digest of a referenced Secret: the older scheme's
  digest, part and template hash are recomputed here and found nowhere in the ToolRuntime, its
  pod, its events or the operator's log.
- Revoking and restoring the operator's read access to a referenced Secret (RBAC: a Role bound
  to the ServiceAccount the operator runs as) hands nothing off: ConfigRefUnreadable while
  revoked, cleared after, the same generation and pod throughout.
- Replicas that share the installation's key agree on the hash (no handoff when one takes over);
  a replica with another key does not (the control).
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from kubernetes import client

from dev.digestkey import ensure as ensure_digest_key
from dev.wait import stays, wait_for
from harness.chart import render, sa_kubeconfig
from harness.operator import OperatorProcess
from harness.runtimes import Runtimes, runtime_manifest
from harness.watchlog import PodWatch

Start = Callable[..., OperatorProcess]
PIN = "1234"


def _secret(name: str, value: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"pin": base64.b64encode(value.encode()).decode()}}


def _referencing(name: str, secret: str) -> dict[str, Any]:
    m = runtime_manifest(name)
    m["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PIN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "pin"}}}]
    return m


def _old_scheme(secret_data: dict[str, str], ref: str, template: dict[str, Any]) -> dict[str, str]:
    """What the unkeyed scheme published for one referenced Secret: its data digest
    (configrefs.data_digest), its part (status.current.parts), the config digest and the
    template hash (status, pod annotation baton.dev/template-hash)."""
    content = json.dumps({"data": secret_data, "binaryData": {}}, sort_keys=True)
    digest = hashlib.sha256(content.encode()).hexdigest()
    part = f"{ref}:{digest}"
    config = hashlib.sha256(part.encode()).hexdigest()[:16]
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return {"digest": digest, "digest16": digest[:16], "part": hashlib.sha256(part.encode()).hexdigest()[:16],
            "config": config, "templateHash": hashlib.sha256((canonical + "\n" + config).encode()).hexdigest()[:16]}


def _template_part(template: dict[str, Any]) -> str:
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((canonical + "\n").encode()).hexdigest()[:16]


def test_nothing_baton_writes_carries_an_unkeyed_digest_of_a_referenced_secret(
        operators: Start, rts: Runtimes, namespace: str, cluster: Any) -> None:
    core = rts.core
    core.create_namespaced_secret(namespace, _secret("pin", PIN))
    op = operators("op-a")
    rts.create(_referencing("pinned", "pin"))
    st = rts.wait_ready("pinned", 1)
    rt = rts.get("pinned")
    template = rt["spec"]["template"]
    parts = st["current"]["parts"]
    # The test rebuilds the template exactly as the operator hashed it (else the check below
    # would prove nothing about the template hash).
    assert parts["template"] == _template_part(template), parts
    secret = core.read_namespaced_secret("pin", namespace)
    old = _old_scheme(dict(secret.data), "Secret/pin", template)
    pod = rts.gen_pod("pinned", 1)
    assert pod is not None
    texts = {
        "ToolRuntime": json.dumps(rt),
        "pod": json.dumps(cluster.api_client.sanitize_for_serialization(pod)),
        "events": " ".join(f"{e.reason} {e.message}" for e in rts.events("pinned")),
        "operator log": op.log_text(),
    }
    leases = client.CoordinationV1Api(cluster.api_client).list_namespaced_lease(namespace).items
    texts["Leases"] = json.dumps(cluster.api_client.sanitize_for_serialization(leases))
    for what, value in old.items():
        for where, text in texts.items():
            assert value not in text, f"the unkeyed {what} of Secret/pin appears in the {where}"
    # The offline guess the unkeyed scheme allowed: no 4-digit PIN reproduces any published part.
    published = set(parts.values()) | {st["current"]["templateHash"]}
    for n in range(10000):
        guess = _old_scheme({"pin": base64.b64encode(f"{n:04d}".encode()).decode()}, "Secret/pin", template)
        assert not published & {guess["part"], guess["templateHash"]}, "a PIN guess matches what Baton published"
    # What is there instead: the keyed part, and the hash on the pod is the status' hash.
    assert len(parts["Secret/pin"]) == 20 and parts["Secret/pin"] not in (old["part"], old["digest16"])
    assert (pod.metadata.annotations or {}).get("baton.dev/template-hash") == st["current"]["templateHash"]


def _operator_role(namespace: str) -> list[dict[str, Any]]:
    """The chart's rules for one watched namespace, without ConfigMaps and Secrets."""
    objs = render(set_json={"watch": {"namespaces": [namespace]}},
                  values={"rbac.readSecrets": "never", "rbac.readConfigMaps": "false"})
    # The Role in the watched namespace (the chart has others in its own: the gateway Leases).
    [role] = [o for o in objs if o["kind"] == "Role" and o["metadata"].get("namespace") == namespace]
    rules: list[dict[str, Any]] = role["rules"]
    assert not any({"secrets", "configmaps"} & set(r.get("resources") or []) for r in rules)
    return rules


def _operator_with_a_role(operators: Start, rts: Runtimes, namespace: str, cluster: Any, tmp_path: Path, *,
                          read_secrets: bool) -> tuple[OperatorProcess, Callable[[bool], None]]:
    """An operator on a ServiceAccount's token with the chart's namespaced rules, and a switch
    for its Secret reads (a RoleBinding to a Role granting get on Secrets, created or deleted)."""
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    rts.core.create_namespaced_service_account(namespace, {"metadata": {"name": "baton-op"}})
    subject = [{"kind": "ServiceAccount", "name": "baton-op", "namespace": namespace}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "baton-op"}, "rules": _operator_role(namespace)})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "baton-op"}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "baton-op"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "read-secrets"}, "rules": [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})
    read_binding = {"metadata": {"name": "read-secrets"}, "subjects": subject,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-secrets"}}

    def allow(yes: bool) -> None:
        if yes:
            rbac.create_namespaced_role_binding(namespace, read_binding)
        else:
            rbac.delete_namespaced_role_binding("read-secrets", namespace)

    if read_secrets:
        allow(True)
    token = cluster.sa_token(namespace, "baton-op", expiration_seconds=1800)
    kubeconfig = sa_kubeconfig(cluster, token, tmp_path / "baton-op.kubeconfig")
    # No ConfigMap/Secret watch (as the chart sets it without list/watch): every pass GETs the
    # referenced Secret, so the Role decides what the operator may read.
    op = operators("op-rbac", kubeconfig=kubeconfig,
                   env={"BATON_WATCH_SECRETS": "false", "BATON_WATCH_CONFIGMAPS": "false"})
    return op, allow


class Poker:
    """New values of an annotation Baton ignores: each a watch event, so a pass reads the Secret now."""

    def __init__(self, rts: Runtimes, name: str) -> None:
        self.rts, self.name, self.n = rts, name, 0

    def poke(self) -> None:
        self.n += 1
        self.rts.annotate(self.name, "example.com/poke", str(self.n))

    def degraded_is(self, reason: str, status: str) -> bool:
        self.poke()
        c = self.rts.condition(self.name, "Degraded") or {}
        return c.get("reason") == reason and c.get("status") == status


def test_revoking_and_restoring_secret_reads_hands_nothing_off(
        operators: Start, rts: Runtimes, namespace: str, cluster: Any, tmp_path: Path,
        pod_watch: PodWatch) -> None:
    rts.core.create_namespaced_secret(namespace, _secret("pin", PIN))
    op, allow = _operator_with_a_role(operators, rts, namespace, cluster, tmp_path, read_secrets=True)
    rts.create(_referencing("rbac", "pin"))
    st1 = rts.wait_ready("rbac", 1, timeout=90)
    pod1 = rts.gen_pod("rbac", 1)
    assert pod1 is not None
    degraded = rts.condition("rbac", "Degraded") or {}
    assert degraded.get("reason") != "ConfigRefUnreadable", degraded

    p = Poker(rts, "rbac")

    def same_generation() -> bool:
        st = rts.status("rbac")
        pod = rts.gen_pod("rbac", 1)
        return (not st.get("transition") and (st.get("current") or {}).get("uid") == pod1.metadata.uid
                and st["current"]["templateHash"] == st1["current"]["templateHash"]
                and pod is not None and pod.metadata.uid == pod1.metadata.uid and rts.gen_pod("rbac", 2) is None)

    # Revoked: reads are refused (403); Degraded says so; nothing hands off.
    allow(False)
    wait_for(lambda: p.degraded_is("ConfigRefUnreadable", "True"), timeout=60, interval=1,
             what="Degraded=True ConfigRefUnreadable once Secret reads are refused")
    unreadable = rts.condition("rbac", "Degraded") or {}
    assert "Secret/pin" in unreadable.get("message", ""), unreadable
    p.poke()
    stays(same_generation, duration=8, what="generation 1 serving, unchanged hash, while reads are refused")
    # Restored: Degraded clears; still nothing hands off.
    allow(True)
    wait_for(lambda: p.degraded_is("Healthy", "False"), timeout=60, interval=1,
             what="Degraded cleared once Secret reads are allowed again")
    p.poke()
    stays(same_generation, duration=8, what="generation 1 serving, unchanged hash, once reads are allowed again")
    assert pod_watch.assert_one_at_a_time("rbac") == [1]
    assert rts.status("rbac")["current"]["parts"] == st1["current"]["parts"]
    assert op.metric("baton_handoffs_total") == 0


def test_a_secret_unreadable_from_the_first_is_adopted_once_readable_without_a_handoff(
        operators: Start, rts: Runtimes, namespace: str, cluster: Any, tmp_path: Path,
        pod_watch: PodWatch) -> None:
    """First sight unreadable: the part is "unseen"; readable later, its value then becomes
    generation 1's (same pod, no handoff); a later change of its data hands off."""
    rts.core.create_namespaced_secret(namespace, _secret("pin", PIN))
    op, allow = _operator_with_a_role(operators, rts, namespace, cluster, tmp_path, read_secrets=False)
    rts.create(_referencing("late", "pin"))
    st1 = rts.wait_ready("late", 1, timeout=90)
    assert st1["current"]["parts"]["Secret/pin"] == "unseen", st1["current"]
    p = Poker(rts, "late")
    wait_for(lambda: p.degraded_is("ConfigRefUnreadable", "True"), timeout=60, interval=1,
             what="Degraded=True ConfigRefUnreadable while Secret reads are refused")
    pod1 = rts.gen_pod("late", 1)
    assert pod1 is not None
    allow(True)

    def adopted() -> dict[str, Any] | None:
        p.poke()
        cur = rts.status("late").get("current") or {}
        return cur if len((cur.get("parts") or {}).get("Secret/pin", "")) == 20 else None

    cur = wait_for(adopted, timeout=60, interval=1, what="the Secret's part adopted once readable")
    assert cur["uid"] == pod1.metadata.uid and cur["generation"] == 1
    assert cur["templateHash"] != st1["current"]["templateHash"], "the hash now carries the Secret's part"
    wait_for(lambda: p.degraded_is("Healthy", "False"), timeout=60, interval=1, what="Degraded cleared")
    stays(lambda: rts.gen_pod("late", 2) is None and (rts.gen_pod("late", 1) or pod1).metadata.uid == pod1.metadata.uid,
          duration=6, what="no handoff on adoption")
    # Tracked from now on: a change of the Secret's data hands off once.
    rts.core.patch_namespaced_secret("pin", namespace, _secret("pin", "4321"))
    p.poke()  # no Secret watch here (the chart's setting without list/watch): a pass must read it
    rts.wait_ready("late", 2, timeout=60)
    assert pod_watch.assert_one_at_a_time("late") == [1, 2]
    assert op.metric("baton_handoffs_total") == 1


def test_replicas_sharing_the_key_agree_and_another_key_does_not(
        operators: Start, rts: Runtimes, namespace: str, tmp_path: Path, pod_watch: PodWatch) -> None:
    rts.core.create_namespaced_secret(namespace, _secret("pin", PIN))
    # The `operators` fixture gives every replica of a test the same key file (as the chart mounts
    # the same Secret into every replica).
    a, b = operators("op-a"), operators("op-b")
    assert a.env["BATON_DIGEST_KEY_FILE"] == b.env["BATON_DIGEST_KEY_FILE"]
    rts.create(_referencing("shared", "pin"))
    st1 = rts.wait_ready("shared", 1, timeout=60)
    a.kill()
    # op-b alone now: woken by an event, it hashes the runtime with the same key and finds no change.
    rts.annotate("shared", "example.com/poke", "b")
    stays(lambda: rts.gen_pod("shared", 2) is None and rts.gen_pod("shared", 1) is not None
          and rts.status("shared")["current"]["templateHash"] == st1["current"]["templateHash"],
          duration=10, what="no handoff when the replica with the same key takes over")
    b.kill()
    # The control: a replica with another key sees every config digest change, and hands off.
    other = operators("op-c", env={"BATON_DIGEST_KEY_FILE": ensure_digest_key(tmp_path / "other.key")})
    rts.annotate("shared", "example.com/poke", "c")
    st2 = rts.wait_ready("shared", 2, timeout=60)
    assert st2["current"]["templateHash"] != st1["current"]["templateHash"]
    assert st2["current"]["parts"]["template"] == st1["current"]["parts"]["template"]
    assert st2["current"]["parts"]["Secret/pin"] != st1["current"]["parts"]["Secret/pin"]
    assert pod_watch.assert_one_at_a_time("shared") == [1, 2]
    assert other.metric("baton_handoffs_total") == 1


def test_the_operator_refuses_to_start_without_a_key(cluster: Any, tmp_path: Path) -> None:
    proc = OperatorProcess(cluster, tmp_path, identity="nokey", namespaces=["default"],
                           env={"BATON_DIGEST_KEY_FILE": ""})
    proc.launch()
    assert proc.proc is not None
    try:
        rc = proc.proc.wait(timeout=60)
    finally:
        proc.kill()
    assert rc == 2
    assert "BATON_DIGEST_KEY_FILE is not set" in proc.log_text()


