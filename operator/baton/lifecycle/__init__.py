"""Pure lifecycle decisions: ``decide(observed, now) -> Plan``.

No I/O: no kubernetes, kopf or network imports (an import-linter contract enforces it). The
clock is a parameter; waiting is returned as data.
"""

from baton.lifecycle.dispatch import decide
from baton.lifecycle.policy import idle_check_due

__all__ = ["decide", "idle_check_due"]
