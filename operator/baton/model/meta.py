"""Helpers for the API's metadata on the wire (RFC 3339 times). Pure, no I/O."""

from __future__ import annotations

import datetime


def parse_time(text: str | None) -> datetime.datetime | None:
    """An RFC 3339 time as the API server writes it ("...Z"); None when absent or not a time
    (the plugin shows `<unknown>` for it rather than failing)."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
