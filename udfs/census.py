"""The domain census: how many hosts each registrable domain has (decisions 1800, 1811).

The frontier is keyed by host, so no host can count its domain's other hosts. Each host asks a small
keyed-by-domain census once (`host_seen`, a side output of the frontier, never on a topic), and the
census answers with the domain's count (`domain_hosts`, on `crawl.outcomes`, keyed by the host): the
host's share of the domain budget is then 1 / count (udfs.budgets.share_for).

A new host is told the count at once; every known host of the domain is told again each time the count
doubles (udfs.budgets.should_announce), so a host's count is never more than 2x stale and a domain of
n hosts costs about 2n answers over its life. Asking twice (a retry, or a host asking again after an
upgrade) never counts a host twice: the census keeps the domain's host names.

Pure functions: no I/O, no PyFlink.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from udfs.budgets import should_announce
from udfs.records import SCHEMA_VERSION, DomainHosts
from udfs.urls import registrable_domain

__all__ = ["CensusStep", "HOST_SEEN", "count_host", "domain_hosts", "host_seen", "seen_domain"]

HOST_SEEN = "host_seen"


def host_seen(host: str) -> dict[str, Any]:
    """The question a frontier host asks the census: `host` is the frontier key (a port when not default)."""
    return {"type": HOST_SEEN, "host": host, "domain": registrable_domain(host)}


def seen_domain(event: Any) -> str:
    """The census key of a `host_seen` event (its domain; "" for anything else, which the census drops)."""
    if isinstance(event, dict) and event.get("type") == HOST_SEEN and isinstance(event.get("domain"), str):
        return event["domain"]
    return ""


def domain_hosts(host: str, count: int) -> DomainHosts:
    """The census's answer to one host: its domain has `count` hosts."""
    return {"v": SCHEMA_VERSION, "type": "domain_hosts", "host": host, "hosts": count}


@dataclass(frozen=True)
class CensusStep:
    """What the census does with one `host_seen`: the domain's new count, and whom to tell.

    count: hosts of the domain, this one included. new: the host was not known before.
    tell_all: tell every known host of the domain (the count reached a power of two); otherwise only the asker.
    """

    count: int
    new: bool
    tell_all: bool


def count_host(count: int, known: bool) -> CensusStep:
    """The census's step for a host that is `known` or not, when the domain had `count` hosts."""
    if known:
        return CensusStep(count, False, False)
    count += 1
    return CensusStep(count, True, should_announce(count) and count > 1)
