"""What carrying out one plan came to, as values; and the two ways a plan stops early. No I/O."""

from __future__ import annotations

import dataclasses
import datetime


class Aborted(Exception):
    """The rest of the plan must not run; re-observe."""


class Superseded(Exception):
    """A write refused because the runtime changed since this pass read it (resourceVersion):
    not an error; it has been read again, and is decided again at once."""


@dataclasses.dataclass
class Outcome:
    """What one plan's run learnt, for the pass to fold into its own memory. A field left at its
    default was not learnt by this plan (the memory keeps what it had)."""

    ok: bool = True  # False: an action failed or the plan was aborted (the caller backs off)
    again_now: bool = False  # cut short because the runtime changed: decide again at once
    ran_through: bool = False  # every action ran: the last error and pod rejection are recorded in status
    last_error: str | None = None  # the failed action's error
    pod_rejected: str | None = None  # the API server's refusal of this plan's pod create
    create_in_doubt: int | None = None  # the generation whose create got no definite answer
    name_taken: bool | None = None  # whether a pod holds the runtime's name (create or ConfirmNoPod)
    service_taken: bool | None = None  # whether a Service we do not own holds the name
    service_error: str | None = None  # the API server's refusal of our Service write; "" once one succeeded
    reads: int = 0  # fresh GETs made for this runtime
    lease_acquired_at: datetime.datetime | None = None  # wall time this plan acquired the Lease
    lease_token: int | None = None  # the fencing token this plan acquired the Lease with
    namespace_terminating: bool = False  # the Lease create was refused: the namespace is being deleted
    lease_outside_view: str | None = None  # the Lease create met one outside the view; "" once acquired
