"""What calls may keep at the gateway, as one ledger: calls held (per runtime and in all) and
bytes of request bodies in memory (in all; held bodies also per runtime and in all, below the
whole by a quarter kept for calls on their way to a serving pod). No I/O.

Each call takes what it keeps through its own `Ticket`, all or nothing, and gives back exactly
what it took, once (`release`, idempotent): a refusal at a bound took nothing and gives back
nothing (review item 1: a refusal used to give back a hold it never took, so the cap leaked).
Past a bound the call is refused at once with `Overloaded`; nothing waits for room.
"""

from __future__ import annotations

from baton.gateway import gwmetrics, route
from baton.gateway import state as state_mod


class Ledger:
    def __init__(self, *, state: state_mod.State, max_held_per_runtime: int, max_held_total: int,
                 max_buffered_bytes: int, max_held_bytes_per_runtime: int) -> None:
        self.state = state
        self.max_held_per_runtime = max_held_per_runtime
        self.max_held_total = max_held_total
        self.max_buffered_bytes = max_buffered_bytes
        # Held bodies may fill the bytes bound but for a quarter, kept for the small bodies of
        # calls on their way to a serving pod: a runtime whose calls are held (a flood, a long
        # handoff) never starves the others' calls. And one runtime's held bodies take at most
        # their own share.
        self.max_held_bytes = max_buffered_bytes - max_buffered_bytes // 4
        self.max_held_bytes_per_runtime = min(max_held_bytes_per_runtime, self.max_held_bytes)

    def ticket(self) -> "Ticket":
        return Ticket(self)


class Ticket:
    """One call's share of the ledger."""

    __slots__ = ("ledger", "held", "bytes", "held_bytes", "forwarded", "held_since")

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.held: state_mod.Key | None = None
        self.bytes = 0  # all of its body bytes in memory
        self.held_bytes = 0  # of which, taken as a held body of runtime `held`
        self.forwarded = False  # it went to a pod (counted in flight there): what a cancel cuts
        # When its hold began (monotonic; None: never held): its answer's Baton-Held-Ms.
        self.held_since: float | None = None

    def hold(self, key: state_mod.Key) -> route.Refuse | None:
        """Take a held place for runtime `key`; the refusal (nothing taken) at a bound."""
        ledger, st = self.ledger, self.ledger.state
        if self.held is not None:
            return None
        if st.held[key] >= ledger.max_held_per_runtime:
            return route.Refuse(route.Reason.OVERLOADED, 1,
                                f"more than {ledger.max_held_per_runtime} calls held for this runtime")
        if st.held_total >= ledger.max_held_total:
            return route.Refuse(route.Reason.OVERLOADED, 1,
                                f"more than {ledger.max_held_total} calls held at this gateway replica in all")
        st.held[key] += 1
        st.held_total += 1
        self.held = key
        gwmetrics.HELD.inc()
        return None

    def reserve(self, n: int) -> route.Refuse | None:
        """Take `n` more bytes of body memory (a held call's body once it holds a place: counted
        against the held shares too); the refusal (nothing taken) past a bound."""
        ledger, st = self.ledger, self.ledger.state
        if st.buffered_bytes + n > ledger.max_buffered_bytes:
            return route.Refuse(route.Reason.OVERLOADED, 1,
                                f"request bodies at this gateway replica are at their bound ({ledger.max_buffered_bytes} bytes)")
        key = self.held
        if key is not None:
            if st.held_bytes[key] + n > ledger.max_held_bytes_per_runtime:
                return route.Refuse(route.Reason.OVERLOADED, 1,
                                    f"bodies of calls held for this runtime are at their bound ({ledger.max_held_bytes_per_runtime} bytes)")
            if st.held_bytes_total + n > ledger.max_held_bytes:
                return route.Refuse(route.Reason.OVERLOADED, 1,
                                    f"bodies of held calls at this gateway replica are at their bound ({ledger.max_held_bytes} bytes)")
            st.held_bytes[key] += n
            st.held_bytes_total += n
            self.held_bytes += n
        st.buffered_bytes += n
        self.bytes += n
        return None

    def release(self) -> None:
        st = self.ledger.state
        if self.held_bytes:
            key = self.held
            assert key is not None
            st.held_bytes[key] -= self.held_bytes
            if st.held_bytes[key] <= 0:
                del st.held_bytes[key]
            st.held_bytes_total -= self.held_bytes
            self.held_bytes = 0
        if self.held is not None:
            key, self.held = self.held, None
            st.held[key] -= 1
            if st.held[key] <= 0:
                del st.held[key]
            st.held_total -= 1
            gwmetrics.HELD.dec()
        if self.bytes:
            st.buffered_bytes -= self.bytes
            self.bytes = 0
