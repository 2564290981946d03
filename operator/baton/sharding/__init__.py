"""Replicas that split the work (BATON_SHARD_RANGES; docs/architecture.md, "Sharding").

The runtimes' hash space (FNV-1a of metadata.uid, as Kubernetes' sharded list/watch cuts it) is
cut into a fixed number of ranges; each replica holds its share through Leases in the
operator's namespace. ``ranges`` is pure (which range a runtime falls in, each replica's share,
which ranges to take or hand back, who is alive: the clock is passed in); ``keeper`` does the I/O
(through baton.k8s.shardleases) and tells the controller which runtimes are its own.

A range only says which replica *tries* a runtime: every step still needs that runtime's own
Lease, so a range moving between replicas can never let two act on one runtime.
"""
