"""Parsed per-host rules (robots.txt, tdmrep.json) kept between a host's events, so a body in state is
parsed once per host and expiry rather than once per event; and the bodies as state keeps them."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, TypeVar

from udfs.records import unb64

Rules = TypeVar("Rules")


class RulesByHost(Generic[Rules]):
    """Each host's parsed rules, valid for the expiry they were parsed under: a refreshed file is never
    judged by the old parse. Bounded to `size` hosts, the least recently used leaving first; transient
    (the caller parses the stored body again on a miss)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[str, tuple[float, Rules]] = OrderedDict()

    def get(self, host: str, expires_at: float) -> Rules | None:
        """The host's rules parsed under `expires_at`, or None."""
        cached = self._entries.get(host)
        if cached is None or cached[0] != expires_at:
            return None
        self._entries.move_to_end(host)
        return cached[1]

    def put(self, host: str, expires_at: float, rules: Rules) -> None:
        self._entries[host] = (expires_at, rules)
        self._entries.move_to_end(host)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def drop(self, host: str) -> None:
        self._entries.pop(host, None)


def stored_body(body_b64: Any) -> bytes:
    """A body as state and events carry it (base64 text) as bytes; anything unreadable is an empty body."""
    if not isinstance(body_b64, str):
        return b""
    try:
        return unb64(body_b64)
    except ValueError:
        return b""
