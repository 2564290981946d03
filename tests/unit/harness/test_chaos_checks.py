"""The checks of the seeded fault orderings (harness.chaos) catch what they claim to, on watch
logs made up here: a check that cannot fail proves nothing. Also: an ordering is its seed."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from harness.chaos.actions import Verb, actions, run_seeds, sharded
from harness.chaos.checks import check_lease_log, check_pods, check_runtime_log
from harness.watchlog import PodEvent, PodWatch


def _pods(*events: tuple[Any, ...]) -> PodWatch:
    """A PodWatch holding (type, uid, generation, resourceVersion, fencing token[, serving])
    events of runtime "alpha", without a watch behind it."""
    w = PodWatch.__new__(PodWatch)
    w._lock = threading.Lock()
    w.events = [PodEvent(type=e[0], name="alpha", uid=e[1], generation=e[2], resource_version=e[3], received=0.0,
                         deleting=False, annotations={"baton.dev/fencing-token": e[4]}, created=None, node=None,
                         labels={"baton.dev/runtime": "alpha", "baton.dev/generation": str(e[2]),
                                 "baton.dev/serving": "true" if e[5:] and e[5] else "false"})
                for e in events]
    return w


def _life(uid: str, gen: int, rv: int, token: str, *, served: bool = True) -> list[tuple[Any, ...]]:
    """One pod's events: ADDED, (labelled serving), DELETED."""
    return [("ADDED", uid, gen, rv, token), ("MODIFIED", uid, gen, rv + 1, token, served), ("DELETED", uid, gen, rv + 2, token)]


def _rt(rv: int, **status: Any) -> tuple[str, int, dict[str, Any]]:
    return ("MODIFIED", rv, {"metadata": {"name": "alpha"}, "status": status})


def _cf(on: bool, reason: str) -> list[dict[str, str]]:
    return [{"type": "CleanupFailed", "status": "True" if on else "False", "reason": reason}]


FAILURE = {"generation": 1, "uid": "u1"}


def test_an_ordering_is_its_seed() -> None:
    assert actions(7) == actions(7) and actions(7) != actions(8)
    for seed in range(50):
        acts = actions(seed)
        late = sum(a.kind == "late-create" for a in acts)  # the composites, drawn apart
        moves = sum(a.kind == "leave-join" for a in acts)
        assert late <= 1 and 15 <= len(acts) - late - moves <= 25 and sum(a.kind == "delete" for a in acts) <= 1
        assert all(0.1 <= a.gap <= 1.0 for a in acts)
        # Replicas leave and join only where ranges are held (odd seeds).
        assert (1 <= moves <= 3) if sharded(seed) else moves == 0


def test_a_sharded_run_takes_odd_seeds_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATON_CHAOS_SHARDED", raising=False)
    assert run_seeds(first=4, orderings=3) == [4, 5, 6]
    monkeypatch.setenv("BATON_CHAOS_SHARDED", "1")
    assert run_seeds(first=4, orderings=3) == [5, 7, 9]
    assert run_seeds(first=9001, orderings=2) == [9001, 9003]
    assert all(sharded(s) for s in run_seeds(first=1, orderings=200))


def test_pods_one_at_a_time_and_generations_once() -> None:
    ok = _pods(("ADDED", "u1", 1, 10, "1"), ("DELETED", "u1", 1, 12, "1"), ("ADDED", "u2", 2, 13, "2"))
    assert check_pods(ok) == []
    overlap = _pods(("ADDED", "u1", 1, 10, "1"), ("ADDED", "u2", 2, 11, "2"), ("DELETED", "u1", 1, 12, "1"))
    assert any("still existed" in v for v in check_pods(overlap))
    reused = _pods(("ADDED", "u1", 1, 10, "1"), ("DELETED", "u1", 1, 11, "1"), ("ADDED", "u2", 1, 12, "2"))
    assert any("names two pods" in v for v in check_pods(reused))
    backwards = _pods(*_life("u1", 2, 10, "1"), *_life("u2", 1, 20, "2"))
    assert any("not increasing" in v for v in check_pods(backwards))
    lower = _pods(("ADDED", "u1", 1, 10, "3"), ("DELETED", "u1", 1, 11, "3"), ("ADDED", "u2", 2, 12, "2"))
    assert any("lower fencing token" in v for v in check_pods(lower))


def test_a_late_stray_of_a_number_given_up_is_exempt_from_the_order_only() -> None:
    """Chaos seed 11179, as the fix makes it: token 4 sent g3's create (held in the network) and
    left; token 5 resumed at Creating, gave 3 up and created g4; g4 was retired (a suspend);
    the held g3 create landed on the free name (never serving, retired as a stray); then g5."""
    late = _life("u3", 3, 40, "4", served=False)
    seed = _pods(*_life("u1", 1, 10, "1"), *_life("u2", 2, 20, "2"), *_life("u4", 4, 30, "5", served=False),
                 *late, *_life("u5", 5, 50, "6"))
    assert seed.late_strays("alpha") == {"u3"}
    assert check_pods(seed) == []
    # The same pod serving is a number out of order; under a token not below the ones before,
    # it is no fenced-out holder's late create; a number used twice is never exempt.
    served = _pods(*_life("u1", 1, 10, "1"), *_life("u4", 4, 30, "5"), *_life("u3", 3, 40, "4", served=True))
    assert any("not increasing" in v for v in check_pods(served))
    unfenced = _pods(*_life("u1", 1, 10, "1"), *_life("u4", 4, 30, "5"), *_life("u3", 3, 40, "5", served=False))
    assert any("not increasing" in v for v in check_pods(unfenced))
    twice = _pods(*_life("u1", 1, 10, "1"), *_life("u4", 4, 30, "5"), *_life("u1b", 1, 40, "4", served=False))
    assert any("names two pods" in v for v in check_pods(twice))


def test_counters_never_decrease_and_history_never_changes() -> None:
    pods = _pods()
    h1 = [{"generation": 1, "uid": "u1", "outcome": "Retired"}]
    assert check_runtime_log([_rt(1, fencingToken=2, latestGeneration=2, history=h1),
                                    _rt(2, fencingToken=3, latestGeneration=3, history=h1)], pods, []) == []
    assert check_runtime_log([_rt(1, fencingToken=3), _rt(2, fencingToken=2)], pods, [])
    assert check_runtime_log([_rt(1, current={"generation": 3}), _rt(2, current={"generation": 2})], pods, [])
    changed = [{"generation": 1, "uid": "u1", "outcome": "Reset"}]
    assert any("changed" in v for v in check_runtime_log([_rt(1, history=h1), _rt(2, history=changed)],
                                                                pods, []))


def test_reset_and_force_outcomes_need_a_current_verb() -> None:
    reset = [{"generation": 1, "uid": "u1", "outcome": "Reset"}]
    forced = [{"generation": 1, "uid": "u1", "outcome": "ForceRecovered"}]
    assert check_runtime_log([_rt(1, history=reset)], _pods(), [])
    assert check_runtime_log([_rt(1, history=reset)], _pods(),
                                   [Verb("alpha", "baton.dev/reset", 1, "stale")])
    assert not check_runtime_log([_rt(1, history=reset)], _pods(),
                                       [Verb("alpha", "baton.dev/reset", 1, "current")])
    assert check_runtime_log([_rt(1, history=forced)], _pods(), [])


def test_cleanup_failed_cleared_only_by_the_pod_gone_or_a_named_force() -> None:
    failed = _rt(5, conditions=_cf(True, "PodStuckTerminating"), lastCleanupFailure=FAILURE)
    gone_before = _pods(("ADDED", "u1", 1, 1, "1"), ("DELETED", "u1", 1, 4, "1"))
    gone_after = _pods(("ADDED", "u1", 1, 1, "1"), ("DELETED", "u1", 1, 9, "1"))
    cleared = _rt(6, conditions=_cf(False, "PodGone"), lastCleanupFailure=FAILURE)
    assert check_runtime_log([failed, cleared], gone_before, []) == []
    assert check_runtime_log([failed, cleared], gone_after, [])
    assert check_runtime_log([failed, cleared], _pods(), [])
    forced = _rt(6, conditions=_cf(False, "ForceRecovered"), lastCleanupFailure=FAILURE)
    named = [Verb("alpha", "baton.dev/force-recovery", 1, "current")]
    assert check_runtime_log([failed, forced], _pods(), named) == []
    assert check_runtime_log([failed, forced], _pods(), [])
    clean = _rt(6, conditions=_cf(False, "Clean"), lastCleanupFailure=FAILURE)
    assert check_runtime_log([failed, clean], gone_before, [])


def test_lease_token_never_decreases() -> None:
    def lease(rv: int, token: int, name: str = "baton-alpha",
              labels: dict[str, str] | None = None) -> tuple[str, int, dict[str, Any]]:
        meta = {"name": name, "labels": {"baton.dev/runtime": "alpha"} if labels is None else labels}
        return ("MODIFIED", rv, {"metadata": meta, "spec": {"leaseTransitions": token}})

    assert check_lease_log([lease(1, 1), lease(2, 2), lease(3, 2)]) == []
    assert check_lease_log([lease(1, 2), lease(2, 1)])
    # The operator's other Leases in the namespace (sharding's, the metrics reporter's) carry no
    # fencing token: not judged.
    shard = {"baton.dev/component": "shard-range"}
    assert check_lease_log([lease(1, 2, "baton-range.4.0", shard), lease(2, 1, "baton-range.4.0", shard)]) == []
