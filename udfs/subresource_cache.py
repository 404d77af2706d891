"""The renders' shared cache of scripts, styles and fonts, keyed by URL with their validators (decision 3902).

Pages of one site load the same bundles, so a render asks the cache first and the gate only for what it
lacks. An entry is fresh for its response's `Cache-Control: max-age` (`s-maxage` first: this is a
shared cache), at most `max_fresh_s`; a response with `no-store` or `private`, a status other than 200
or a body over `max_entry_bytes` is not kept. A stale entry with an `ETag` or `Last-Modified` is
revalidated: `lookup` gives the conditional headers, and a 304 makes the entry fresh again
(`revalidated`). The cache holds at most `max_bytes` of bodies, the least recently used going first.
Pure: time is passed in.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, replace

_DIRECTIVE = re.compile(r"\s*([A-Za-z-]+)\s*(?:=\s*\"?(\d+)\"?)?\s*(?:,|$)")


@dataclass(frozen=True)
class CachedResponse:
    url: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    stored_at: float
    fresh_for_s: float
    etag: str | None
    last_modified: str | None

    def fresh(self, now: float) -> bool:
        return now - self.stored_at < self.fresh_for_s


@dataclass(frozen=True)
class Lookup:
    """A fresh entry (a hit), or the conditional headers to revalidate a stale one (empty: fetch anew)."""

    hit: CachedResponse | None
    conditional: tuple[tuple[str, str], ...] = ()


def freshness(headers: tuple[tuple[str, str], ...], max_fresh_s: float) -> float | None:
    """Seconds a response stays fresh in a shared cache; None: it must not be stored."""
    directives: dict[str, str | None] = {}
    for name, value in headers:
        if name.lower() == "cache-control":
            for match in _DIRECTIVE.finditer(value):
                directives.setdefault(match.group(1).lower(), match.group(2))
    if "no-store" in directives or "private" in directives:
        return None
    if "no-cache" in directives:
        return 0.0
    for name in ("s-maxage", "max-age"):
        seconds = directives.get(name)
        if seconds is not None:
            return min(float(seconds), max_fresh_s)
    return 0.0


def _header(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


class SubresourceCache:
    def __init__(self, max_bytes: int = 64 * 1024 * 1024, max_entry_bytes: int = 5 * 1024 * 1024,
                 max_fresh_s: float = 86_400.0) -> None:
        self.max_bytes, self.max_entry_bytes, self.max_fresh_s = max_bytes, max_entry_bytes, max_fresh_s
        self._entries: OrderedDict[str, CachedResponse] = OrderedDict()
        self._bytes = 0
        self.hits = self.misses = self.revalidations = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, url: str, now: float) -> Lookup:
        entry = self._entries.get(url)
        if entry is None:
            self.misses += 1
            return Lookup(None)
        self._entries.move_to_end(url)
        if entry.fresh(now):
            self.hits += 1
            return Lookup(entry)
        self.misses += 1
        conditional = ((("If-None-Match", entry.etag),) if entry.etag else ()) + \
            ((("If-Modified-Since", entry.last_modified),) if entry.last_modified else ())
        return Lookup(None, conditional)

    def store(self, url: str, status: int, headers: tuple[tuple[str, str], ...], body: bytes, now: float) -> bool:
        """Keep a fetched response if it may be kept; whether it was."""
        fresh_for = freshness(headers, self.max_fresh_s)
        etag, modified = _header(headers, "etag"), _header(headers, "last-modified")
        if status != 200 or fresh_for is None or len(body) > self.max_entry_bytes \
                or (fresh_for == 0.0 and etag is None and modified is None):
            return False
        self._drop(url)
        self._entries[url] = CachedResponse(url, status, headers, body, now, fresh_for, etag, modified)
        self._bytes += len(body)
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def revalidated(self, url: str, headers: tuple[tuple[str, str], ...], now: float) -> CachedResponse | None:
        """After a 304 for `url`: the entry, fresh again (for the 304's max-age when it gives one)."""
        entry = self._entries.get(url)
        if entry is None:
            return None
        fresh_for = freshness(headers, self.max_fresh_s)
        if fresh_for is None:
            self._drop(url)
            return entry
        self.revalidations += 1
        entry = replace(entry, stored_at=now, fresh_for_s=fresh_for or entry.fresh_for_s)
        self._entries[url] = entry
        return entry

    def hit_ratio(self) -> float:
        asked = self.hits + self.misses
        return self.hits / asked if asked else 0.0

    def _drop(self, url: str) -> None:
        entry = self._entries.pop(url, None)
        if entry is not None:
            self._bytes -= len(entry.body)
