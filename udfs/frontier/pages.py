"""What a URL's row knows about its page: its value to the recrawl schedule, its in-links and hub
yield, and the pages that named it as their canonical (whose verdicts a broken answer revises)."""
from __future__ import annotations

import enum
from typing import Any

from udfs.inlinks import inlink_estimate, linked_from
from udfs.recrawl import PageValue
from udfs.frontier.rows import MAX_CANONICAL_ALIASES, UrlRecord, UrlStatus, replace


def page_value(record: UrlRecord | None, url: str, depth: int) -> PageValue:
    """What a page is worth to the recrawl schedule (udfs.recrawl.PageValue; decisions 1102, 1813): its
    depth, the distinct pages linking to it (estimated), how many URLs new to its host its
    fetches bring (hub yield), the priority and changefreq its sitemap gave, and its kind
    where the URL says it (a host's root is its home page)."""
    kind = "home" if url.endswith("/") and url.count("/") == 3 else None
    if record is None:
        return PageValue(depth=depth, page_kind=kind)
    return PageValue(inlinks=round(inlink_estimate(record.inlinks)), depth=depth, hub_yield=record.hub_yield or 0.0,
                     sitemap_priority=record.sitemap_priority, changefreq=record.changefreq, page_kind=kind)


def with_inlink(record: UrlRecord, from_fp: Any, fp: int) -> UrlRecord:
    """The record after page `from_fp` linked to URL `fp` (its in-link sketch, decision 1819); the same
    record object when that changes nothing, so the caller writes only on change. Counted once the URL
    has been fetched: a queued URL's short row stays short, and only a fetched page's value is read."""
    if record.history is None:
        return record
    bits = linked_from(record.inlinks, from_fp, fp)
    return record if bits == record.inlinks else replace(record, inlinks=bits)


HUB_MEMORY = 0.5   # weight of the newest fetch in a page's hub yield (a short memory: hubs change)


def with_hub_yield(record: UrlRecord, new_urls: int) -> UrlRecord:
    """The record after one of its fetches brought `new_urls` URLs new to its host (decision 1815): the
    hub yield is a moving average, HUB_MEMORY on the newest fetch."""
    old = record.hub_yield
    value = float(new_urls) if old is None else (1.0 - HUB_MEMORY) * old + HUB_MEMORY * new_urls
    return replace(record, hub_yield=round(value, 2))


class Claim(str, enum.Enum):
    """What became of one page's claim that a URL is its canonical (`claim_canonical`)."""

    REMEMBERED = "remembered"    # the URL waits for its fetch: the page is kept in its record
    REPEATED = "repeated"        # the page was already kept
    OVER_LIMIT = "over_limit"    # MAX_CANONICAL_ALIASES pages are kept already
    BROKEN = "broken"            # the URL's last fetch found it broken: revise the page's verdict now
    SETTLED = "settled"          # fetched and not broken (or not fetchable): the hint stands


def claim_canonical(record: UrlRecord, alias: str) -> tuple[UrlRecord, Claim]:
    """The URL's record after page `alias` named it as its canonical, and what that means (decision 1820):
    a queued URL keeps the page (up to MAX_CANONICAL_ALIASES) for its completion to answer; one already
    fetched answers now, broken (`broken_reason`) or settled. The same record object when unchanged."""
    if broken_reason(record) is not None:
        return record, Claim.BROKEN
    if record.status is not UrlStatus.QUEUED:
        return record, Claim.SETTLED
    if alias in record.canonical_of:
        return record, Claim.REPEATED
    if len(record.canonical_of) >= MAX_CANONICAL_ALIASES:
        return record, Claim.OVER_LIMIT
    return replace(record, canonical_of=record.canonical_of + (alias,)), Claim.REMEMBERED


def broken_reason(record: UrlRecord | None, http_status: Any = None) -> str | None:
    """Why a canonical whose row is `record` is broken, for its pages' revised verdicts,
    or None when it is not: its last fetch answered 404 or 410 (`http_status`, when the caller has the
    completion, says which) or was the host's soft 404 (decision 1844)."""
    if record is None:
        return None
    if record.status is UrlStatus.GONE:
        answer = http_status if http_status in GONE_STATUSES else "404 or 410"
        return f"canonical answered {answer}"
    if record.status is UrlStatus.SOFT_404:
        return "canonical is a soft 404"
    return None


GONE_STATUSES = (404, 410)   # a final answer that the resource is not there (RFC 9110 §15.5.5, §15.5.11)
