"""baton.sharding.ranges: the hash, the shares, the moves at one tick, the sightings."""

from __future__ import annotations

import uuid

import pytest

from baton.model import shardhash
from baton.sharding import ranges

RL = ranges.RangeLease


def test_fnv1a64_matches_the_published_vectors() -> None:
    # The FNV reference test vectors (draft-eastlake-fnv): "", "a", "foobar".
    assert ranges.fnv1a64(b"") == 0xCBF29CE484222325
    assert ranges.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert ranges.fnv1a64(b"foobar") == 0x85944171F73967E8


def test_range_of_spreads_uids_evenly_and_stays_in_bounds() -> None:
    counts = [0] * 16
    for i in range(16000):
        r = ranges.range_of(str(uuid.UUID(int=i * 7919 + 12345)), ranges=16)
        assert 0 <= r < 16
        counts[r] += 1
    assert min(counts) > 800 and max(counts) < 1200, counts
    assert ranges.range_of("x", ranges=1) == 0


def test_the_remembered_uid_hash_is_the_hash_and_stays_bounded() -> None:
    shardhash.uid_hash.cache_clear()
    uids = [str(uuid.UUID(int=i * 104729 + 7)) for i in range(shardhash.UID_HASHES_KEPT + 100)]
    for uid in uids:
        assert shardhash.uid_hash(uid) == shardhash.fnv1a64(uid.encode())
        assert shardhash.range_of(uid, ranges=16) == (shardhash.fnv1a64(uid.encode()) * 16) >> 64
        assert shardhash.hash_bucket(uid) == f"{shardhash.fnv1a64(uid.encode()) >> 56:02x}"
    info = shardhash.uid_hash.cache_info()
    assert info.currsize == shardhash.UID_HASHES_KEPT and info.hits >= 2 * len(uids)


@pytest.mark.parametrize(("members", "total", "expected"), [
    (["a"], 16, {"a": 16}),
    (["a", "b"], 16, {"a": 8, "b": 8}),
    (["a", "b", "c"], 16, {"a": 6, "b": 5, "c": 5}),
    (["c", "a", "b"], 16, {"a": 6, "b": 5, "c": 5}),  # order of sight does not matter
    (["a", "b", "c"], 2, {"a": 1, "b": 1, "c": 0}),
])
def test_shares_add_up_to_every_range(members: list[str], total: int, expected: dict[str, int]) -> None:
    got = {m: ranges.share(member=m, members=members, ranges=total) for m in members}
    assert got == expected
    assert sum(got.values()) == total


def test_alone_a_replica_takes_every_free_range() -> None:
    moves = ranges.plan_moves(me="a", members=["a"], leases=[], held=[], ranges=4)
    assert moves == ranges.Moves(take=(0, 1, 2, 3))


def test_ranges_held_by_a_live_other_are_not_taken() -> None:
    leases = [RL(index=i, holder="b", expired=False) for i in range(4)]
    assert ranges.plan_moves(me="a", members=["a", "b"], leases=leases, held=[], ranges=4) == ranges.Moves()


def test_a_dead_replicas_expired_ranges_are_taken() -> None:
    leases = [RL(index=i, holder="b", expired=True) for i in range(4)]
    # b's membership expired too: a alone, its share is all four.
    assert ranges.plan_moves(me="a", members=["a"], leases=leases, held=[], ranges=4).take == (0, 1, 2, 3)


def test_released_ranges_are_free_at_once() -> None:
    leases = [RL(index=0, holder=None, expired=False), RL(index=1, holder="b", expired=False)]
    assert ranges.plan_moves(me="a", members=["a", "b"], leases=leases, held=[], ranges=2).take == (0,)


def test_over_its_share_a_replica_hands_back_its_highest_ranges() -> None:
    leases = [RL(index=i, holder="a", expired=False) for i in range(4)]
    moves = ranges.plan_moves(me="a", members=["a", "b"], leases=leases, held=[0, 1, 2, 3], ranges=4)
    assert moves == ranges.Moves(hand_back=(2, 3))


def test_at_its_share_nothing_moves() -> None:
    leases = [RL(index=0, holder="a", expired=False), RL(index=1, holder=None, expired=False)]
    assert ranges.plan_moves(me="a", members=["a", "b"], leases=leases, held=[0], ranges=2) == ranges.Moves()


def test_newcomers_reach_for_different_free_ranges_first() -> None:
    # Four free ranges, two members: each starts at its own offset, so they do not collide.
    a = ranges.plan_moves(me="a", members=["a", "b"], leases=[], held=[], ranges=4).take
    b = ranges.plan_moves(me="b", members=["a", "b"], leases=[], held=[], ranges=4).take
    assert a == (0, 1) and b == (2, 3)


def test_a_range_still_naming_this_identity_is_taken_back_after_a_restart() -> None:
    leases = [RL(index=0, holder="a", expired=False)]
    assert ranges.plan_moves(me="a", members=["a"], leases=leases, held=[], ranges=1).take == (0,)


def test_sightings_measure_unchanged_time_by_the_local_clock() -> None:
    s = ranges.Sightings()
    assert s.observe(name="x", version="1", now=100.0) == 0.0
    assert s.observe(name="x", version="1", now=112.5) == 12.5
    assert s.observe(name="x", version="2", now=113.0) == 0.0  # a renewal restarts the count
    s.forget_except(["y"])
    assert s.observe(name="x", version="2", now=200.0) == 0.0  # forgotten: seen anew


@pytest.mark.parametrize("count", [1, 2, 4, 8, 16, 64, 256])
def test_a_runtimes_bucket_label_falls_in_its_range(count: int) -> None:
    """The label a replica selects on (shardhash.hash_bucket of the runtime's UID) names exactly the
    range the runtime's UID hashes to: a range is a whole set of buckets, the sets partition."""
    everything: list[str] = []
    for index in range(count):
        everything += ranges.buckets(index, ranges=count)
    assert everything == [f"{b:02x}" for b in range(256)]
    for i in range(3000):
        uid = str(uuid.UUID(int=i * 104729 + 7))
        bucket = shardhash.hash_bucket(uid)
        index = ranges.range_of(uid, ranges=count)
        assert bucket in ranges.buckets(index, ranges=count)
        assert ranges.range_of_bucket(bucket, ranges=count) == index
    assert ranges.range_of_bucket("zz", ranges=count) is None


def test_the_label_selector_and_the_shard_selector_of_a_range() -> None:
    assert ranges.bucket_selector(1, ranges=64) == "baton.dev/hash-bucket in (04,05,06,07)"
    assert ranges.shard_selector(0, ranges=2) == \
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    # The last range ends at 2^64, written with 17 digits as the API server wants it.
    assert ranges.shard_selector(1, ranges=2) == \
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
    assert ranges.shard_selector(3, ranges=16) == \
        "shardRange(object.metadata.uid, '0x3000000000000000', '0x4000000000000000')"


@pytest.mark.parametrize("count,ok", [(0, True), (1, True), (2, True), (128, True), (256, True),
                                      (3, False), (12, False), (512, False), (-4, False)])
def test_valid_counts(count: int, ok: bool) -> None:
    assert ranges.valid_count(count) is ok
