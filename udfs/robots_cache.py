"""Parsed robots.txt rules shared by every host whose robots.txt is byte for byte the same.

The frontier keeps each host's robots.txt body in state and its parsed rules in a per-host cache; with
more active hosts than that cache holds, every event of an evicted host would parse its body again, and
parsing would be the frontier's largest cost in the crawl benchmark (decision 1613). Many hosts serve the
same file (a CMS's default, one company's many names), so the parse is keyed by the body's digest:
a host that misses its own cache entry costs a hash and a lookup, not a parse.

Pure: bytes in, parsed rules out; the rules are read-only for their users (udfs/robots.py), so one
object can answer for many hosts.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

Rules = TypeVar("Rules")

DEFAULT_DISTINCT_BODIES = 4096


class RulesByBody(Generic[Rules]):
    """`parse(body)`, remembered for the `size` most recently used distinct bodies (LRU)."""

    __slots__ = ("_parse", "_size", "_rules", "hits", "misses")

    def __init__(self, parse: Callable[[bytes], Rules], size: int = DEFAULT_DISTINCT_BODIES) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        self._parse, self._size = parse, size
        self._rules: OrderedDict[bytes, Rules] = OrderedDict()
        self.hits = self.misses = 0

    def __call__(self, body: bytes) -> Rules:
        key = hashlib.blake2b(body, digest_size=16).digest()
        rules = self._rules.get(key)
        if rules is not None:
            self._rules.move_to_end(key)
            self.hits += 1
            return rules
        self.misses += 1
        rules = self._parse(body)
        self._rules[key] = rules
        if len(self._rules) > self._size:
            self._rules.popitem(last=False)
        return rules

    def __len__(self) -> int:
        return len(self._rules)
