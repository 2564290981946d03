"""bench/idle.py (`make bench-idle`): its manifests and flags. The run itself needs the local
plane and the 60 s floor of spec.idle.afterSeconds: no smoke run here (over 20 s)."""
from __future__ import annotations

import contextlib
import io

import pytest

from bench import idle


def test_the_two_sides_differ_only_by_spec_idle() -> None:
    on = idle.runtime("rt-0001", port=8080, loopback=False, idle=False)
    off = idle.runtime("rt-0001", port=8080, loopback=False, idle=True)
    assert off["spec"].pop("idle") == {"afterSeconds": idle.AFTER_SECONDS, "wakeSeconds": idle.WAKE_SECONDS}
    assert on == off
    assert on["spec"]["service"]["gateway"] is True  # spec.idle needs it (refused at admission otherwise)


def test_a_loopback_runtime_lands_on_kwok_loop_and_the_others_never_do() -> None:
    loop = idle.runtime("a", port=41000, loopback=True, idle=True)["spec"]["template"]["spec"]
    assert loop["nodeSelector"] == {"baton.dev/loopback": "true"}
    assert loop["containers"][0]["ports"][0]["containerPort"] == 41000
    far = idle.runtime("b", port=8080, loopback=False, idle=True)["spec"]["template"]["spec"]
    assert "nodeSelector" not in far and "tolerations" not in far


@pytest.mark.parametrize(("argv", "message"), [
    (["--n", "10"], "--n must be in 20..5000, got 10"),
    (["--awake", "0"], "--awake must be in 1..100, got 0"),
    (["--n", "20", "--awake", "15", "--wakes", "10"], "--awake + --wakes must be at most min(--n, 100)"),
])
def test_bad_flags_name_the_flag(argv: list[str], message: str) -> None:
    err = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(err):
        idle.main(argv)
    assert message in err.getvalue()


def test_a_runtime_already_idle_counts_as_started() -> None:
    ready = {"status": {"current": {"generation": 1}, "conditions": [{"type": "Ready", "status": "True"}]}}
    gone_idle = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Idle"}],
                            "idle": {"since": "2026-12-06T13:00:00Z"}}}
    assert idle.runtime_summary(ready)[1:] == (True, False, False)
    assert idle.runtime_summary(gone_idle)[3] is True
