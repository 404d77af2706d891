"""Sitemaps at the frontier: the `Sitemap:` lines of a host's robots.txt as discovered entries, the
hints a sitemap gives an entry, and the earlier due time a sitemap lastmod earns a fetched URL."""
from __future__ import annotations

from typing import Any

from udfs.records import PRIORITY_SITEMAP
from udfs.recrawl import RecrawlPolicy, lastmod_forward
from udfs.urls import host_key, normalize_url, url_fp
from udfs.frontier.rows import HostState, UrlRecord, UrlStatus, _number


def sitemap_hints(raw: dict[str, Any]) -> tuple[float | None, str | None]:
    """(priority in [0, 1], changefreq in lower case) a sitemap gave a discovered entry; absent or
    malformed values read as None (decision 1813)."""
    priority, changefreq = _number(raw.get("sitemap_priority")), raw.get("changefreq")
    return (min(max(priority, 0.0), 1.0) if priority is not None else None,
            changefreq.lower()[:16] if isinstance(changefreq, str) and changefreq else None)


def robots_sitemaps(host: str, listed: list[str], depth: int,
                    limit: int) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The first `limit` distinct `Sitemap:` URLs of the host's robots.txt as discovered entries
    (udfs.records.UrlEntry with `sitemap` set) grouped by the host that serves each (the frontier key),
    and how many lines were skipped (malformed, repeated or over the limit; decision 1812). `depth` is
    the host's closest URL's: a sitemap is as close to a seed as its host. A sitemap another host
    serves names `host` in `sitemap_for`: it speaks for this host's pages too (decision 1816)."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    skipped = 0
    for raw in listed:
        url = normalize_url(raw) if isinstance(raw, str) else None
        try:
            key = host_key(url) if url is not None else None
        except ValueError:
            key = None
        if key is None or url in seen or len(seen) >= limit:
            skipped += 1
            continue
        seen.add(url)
        entry = {"url": url, "fp": url_fp(url), "depth": depth, "priority": PRIORITY_SITEMAP, "source": "sitemap",
                 "sitemap": True}
        if key != host:
            entry["sitemap_for"] = host
        by_host.setdefault(key, []).append(entry)
    return by_host, skipped


def sitemap_due(record: UrlRecord, lastmod: Any, state: HostState, now: float, recrawl: RecrawlPolicy) -> float | None:
    """An earlier due time for a fetched URL whose sitemap `lastmod` says it changed after its last
    fetch, or None: udfs.recrawl.lastmod_forward brings the due time towards `now` as far as the
    host's lastmods have proved accurate, never closer than min_interval_s after the last fetch.
    Malformed claims, URLs not scheduled and URLs already brought forward (until their refetch)
    change nothing."""
    if (record.status is not UrlStatus.DONE or record.history is None or record.due is None
            or record.history.last_fetch_at is None or _number(lastmod) is None or record.lastmod_claim):
        return None
    due = lastmod_forward(record.due, record.history.last_fetch_at, float(lastmod), now, state.signals, recrawl)
    return due if due < record.due - 1.0 else None
