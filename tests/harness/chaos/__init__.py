"""Seeded fault orderings on the real local plane (issue 13, part 2; tests/chaos/).

Modules: `actions` (constants, the seeded actions, verbs), `ordering` (`Ordering`, `Result`,
`RESULTS`), `checks` (the invariants), `lanes` (`Lane`, `side_lane`).

One ordering: three runtimes, three operator replicas (op-b talks to the API server through the
forwarding proxy), a sequence of 15-25 actions drawn from a seed, each after a short random gap;
then every fault is released, convergence is awaited (bounded), and the invariants are checked
on what the API server itself recorded: the watch logs of pods, ToolRuntimes and Leases (each in
resourceVersion order, one watch per kind) and the final objects.

`actions(seed)` depends on the seed only, so a violation replays with the same action list
(`make chaos SEED=<seed> ORDERINGS=1`). What each action finds when it runs (the current
generation, whether a pod is stuck) depends on timing: the log of what was done is printed too.

Everything is bounded and loopback-only: operator processes are killed and reaped by the
`operators` fixture (SIGCONT first), the proxy listens on 127.0.0.1, the namespace is deleted.
"""
