"""What an ordering does: the constants of the setup, the seeded actions (`actions(seed)`,
replayed by `make chaos SEED=<seed> ORDERINGS=1`) and the verb annotations they write."""
from __future__ import annotations

import os
import random
from dataclasses import dataclass


RUNTIMES = ("alpha", "beta", "gamma")
REPLICAS = ("a", "b", "c")
PROXIED = "b"  # this replica's requests go through the forwarding proxy (delayed creates)
LEASE_SECONDS = 4
BUDGETS = {"lockSeconds": 5, "connectSeconds": 5, "drainSeconds": 2, "terminationGraceSeconds": 1,
           "cleanupSeconds": 4}
HOLD = "chaos.baton.dev/hold"  # the finalizer that makes a pod stuck
CONVERGE_SECONDS = 90
# Odd seeds run the replicas sharded (BATON_SHARD_RANGES): every SIGKILL then also moves ranges
# (the new incarnation joins, the dead one's ranges expire), SIGSTOP lets them lapse, and the
# end of an ordering hands them back (SIGTERM). Even seeds run as before.
SHARD_RANGES = 4


def sharded(seed: int) -> bool:
    return seed % 2 == 1


def seed_stride() -> int:
    """1, or 2 with BATON_CHAOS_SHARDED=1 (`make chaos SHARDED=1`): every ordering run is then a
    sharded one (odd seeds only), with its range moves and leave-joins."""
    return 2 if os.environ.get("BATON_CHAOS_SHARDED") == "1" else 1


def run_seeds(*, first: int, orderings: int) -> list[int]:
    """The seeds `make chaos SEED=first ORDERINGS=orderings` runs: consecutive ones, or, with
    BATON_CHAOS_SHARDED=1, the first `orderings` odd ones from `first` on."""
    stride = seed_stride()
    if stride == 2 and not sharded(first):
        first += 1
    return [first + stride * k for k in range(orderings)]
GC_SECONDS = 20

# kind: (weight, what it targets)
KINDS: dict[str, tuple[float, str]] = {
    "template": (4, "runtime"),
    "reset": (2, "runtime"),
    "reset-stale": (1.5, "runtime"),
    "suspend": (1, "runtime"),
    "resume": (1, "runtime"),
    "stick": (3, "runtime"),
    "unstick": (0.5, "runtime"),
    "force": (2, "runtime"),
    "force-stale": (1, "runtime"),
    "sigkill": (1, "replica"),
    "sigstop": (1, "replica"),
    "sigcont": (1, "replica"),
    "hold-create": (1, ""),
    "release-create": (1, ""),
    "delete": (1, "runtime"),
    # Composite, drawn apart in actions() (weight 0 here) so earlier seeds' orderings stay as
    # they were: a create held in the network, its sender stopped past the Lease, another
    # replica takes over, then the held create arrives.
    "late-create": (0, ""),
    # Sharded seeds only, drawn apart too: a replica leaves gracefully (SIGTERM: it hands its
    # ranges back and releases what it holds) and a new incarnation joins at once, taking ranges.
    "leave-join": (0, "replica"),
}
LATE_CREATE_SHARE = 0.3  # of orderings that get one late-create action
LEAVE_JOIN_MAX = 3  # leave-join actions in a sharded ordering: 1..LEAVE_JOIN_MAX


@dataclass(frozen=True)
class Action:
    kind: str
    target: str
    gap: float  # seconds slept before it

    def __str__(self) -> str:
        return f"+{self.gap:.2f}s {self.kind}{' ' + self.target if self.target else ''}"


def actions(seed: int) -> list[Action]:
    """The ordering of `seed`: 15-25 actions, each after a gap of 0.1-1.0 s. At most one runtime
    is deleted (the others keep going). Composite actions are drawn from RNGs of their own, so
    adding one left the orderings of earlier seeds as they were."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    out: list[Action] = []
    deleted = False
    for _ in range(rng.randint(15, 25)):
        kind = rng.choices(kinds, weights=[KINDS[k][0] for k in kinds])[0]
        if kind == "delete" and deleted:
            kind = "template"
        deleted = deleted or kind == "delete"
        what = KINDS[kind][1]
        target = rng.choice(RUNTIMES) if what == "runtime" else rng.choice(REPLICAS) if what else ""
        out.append(Action(kind, target, round(rng.uniform(0.1, 1.0), 2)))
    late = random.Random(f"late-create-{seed}")
    if late.random() < LATE_CREATE_SHARE:
        out.insert(late.randint(0, len(out)), Action("late-create", "", round(late.uniform(0.1, 1.0), 2)))
    if sharded(seed):
        moves = random.Random(f"leave-join-{seed}")
        for _ in range(moves.randint(1, LEAVE_JOIN_MAX)):
            out.insert(moves.randint(0, len(out)),
                       Action("leave-join", moves.choice(REPLICAS), round(moves.uniform(0.1, 1.0), 2)))
    return out


def replay_hint(seed: int) -> str:
    return f"make chaos SEED={seed} ORDERINGS=1"


@dataclass
class Verb:
    """A verb annotation this run wrote: `intent` is "current" (named the generation it was
    meant for, when written) or "stale" (0 or an already retired generation)."""

    runtime: str
    key: str
    value: int
    intent: str
