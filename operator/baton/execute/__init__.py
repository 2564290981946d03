"""Carries a Plan out through ``baton.k8s``, keeps the Leases this process holds, posts events.
Does I/O (through baton.k8s, async).

executor (the plan loop) > actions (one coroutine per action kind) > statuswrite, leasekeeper,
events > outcomes; an import-linter contract keeps that order.
"""

from baton.execute.executor import Executor
from baton.execute.outcomes import Outcome

__all__ = ["Executor", "Outcome"]
