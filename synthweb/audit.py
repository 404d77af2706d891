"""Politeness audits over the server's request log: what the crawler did, seen from the web's side.

Each check is a pure function of request records (and, for robots, of the web's description) that
returns `Violation`s; `audit_politeness` runs them all. Times are the server's: a request lasts from
its request line to its last byte written.
"""
from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from synthweb.corpus import Corpus
from synthweb.generate import default_corpus
from synthweb.model import Web
from synthweb.reqlog import Record, RequestRecord, requests_only
from synthweb.robots import MOVED_PATH, effective_robots
from udfs.robots import RobotsRules, parse_robots

ROBOTS_PATHS = ("/robots.txt", MOVED_PATH)


class ViolationKind(str, enum.Enum):
    HOST_CONCURRENCY = "host_concurrency"      # two requests in flight on one host
    IP_CONCURRENCY = "ip_concurrency"          # more than the limit in flight on one address
    CRAWL_DELAY = "crawl_delay"                # a gap under the host's crawl delay
    BEFORE_ROBOTS = "before_robots"            # a page fetched before robots.txt was known
    DISALLOWED = "disallowed"                  # a URL robots.txt disallows
    ROBOTS_UNAVAILABLE = "robots_unavailable"  # a page fetched while robots.txt answered 5xx/429
    RETRY_AFTER = "retry_after"                # a request before the Retry-After time passed


@dataclass(frozen=True)
class Violation:
    """One breach of politeness, with the request that committed it."""

    kind: ViolationKind
    host: str
    path: str
    at: float          # started_at of the offending request
    detail: str


def _path(r: RequestRecord) -> str:
    return urlsplit(r["path"]).path or "/"


def is_robots(r: RequestRecord) -> bool:
    """Robots fetches (and robots redirect targets) are exempt from page rules."""
    return _path(r) in ROBOTS_PATHS


def _by(reqs: Iterable[RequestRecord], field: str) -> dict[str, list[RequestRecord]]:
    groups: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in reqs:
        groups[r[field]].append(r)  # type: ignore[literal-required]
    return groups


def host_overlaps(reqs: Sequence[RequestRecord], tolerance: float = 0.02) -> list[Violation]:
    """Invariant 1: at most one request in flight per host (overlapping [started, ended])."""
    out: list[Violation] = []
    for host, rs in _by(reqs, "host").items():
        latest_end = float("-inf")
        for r in sorted(rs, key=lambda r: r["started_at"]):
            if r["started_at"] < latest_end - tolerance:
                out.append(Violation(ViolationKind.HOST_CONCURRENCY, host, r["path"], r["started_at"],
                                     f"started {latest_end - r['started_at']:.3f}s before the previous request ended"))
            latest_end = max(latest_end, r["ended_at"])
    return out


def ip_concurrency(reqs: Sequence[RequestRecord], limit: int = 1, tolerance: float = 0.02) -> list[Violation]:
    """Invariant 1: at most `limit` requests in flight per server address (shared hosting)."""
    out: list[Violation] = []
    for ip, rs in _by(reqs, "server_ip").items():
        ends: list[float] = []
        for r in sorted(rs, key=lambda r: r["started_at"]):
            ends = [e for e in ends if e - tolerance > r["started_at"]]
            ends.append(r["ended_at"])
            if len(ends) > limit:
                out.append(Violation(ViolationKind.IP_CONCURRENCY, r["host"], r["path"], r["started_at"],
                                     f"{len(ends)} requests in flight on {ip} (limit {limit})"))
    return out


def crawl_delay_gaps(reqs: Sequence[RequestRecord], delays: Mapping[str, float],
                     tolerance: float = 0.02) -> list[Violation]:
    """Crawl-delay: the gap from the end of one page request to the start of the next on a host."""
    out: list[Violation] = []
    for host, rs in _by((r for r in reqs if not is_robots(r)), "host").items():
        delay = delays.get(host, 0.0)
        if delay <= 0:
            continue
        latest_end = float("-inf")
        for r in sorted(rs, key=lambda r: r["started_at"]):
            gap = r["started_at"] - latest_end
            if gap < delay - tolerance:
                out.append(Violation(ViolationKind.CRAWL_DELAY, host, r["path"], r["started_at"],
                                     f"gap {gap:.3f}s under crawl delay {delay:g}s"))
            latest_end = max(latest_end, r["ended_at"])
    return out


def before_robots(reqs: Sequence[RequestRecord]) -> list[Violation]:
    """Invariant 2: nothing but robots.txt is fetched from a host before its robots.txt answered."""
    out: list[Violation] = []
    for host, rs in _by(reqs, "host").items():
        robots_done = min((r["ended_at"] for r in rs if _path(r) == "/robots.txt"), default=float("inf"))
        for r in rs:
            if not is_robots(r) and r["started_at"] < robots_done:
                out.append(Violation(ViolationKind.BEFORE_ROBOTS, host, r["path"], r["started_at"],
                                     "no robots.txt answer yet" if robots_done == float("inf")
                                     else f"{robots_done - r['started_at']:.3f}s before robots.txt answered"))
    return out


def disallowed_requests(reqs: Sequence[RequestRecord], rules: Mapping[str, RobotsRules | None],
                        user_agent: str) -> list[Violation]:
    """Invariant 2: a URL the host's robots.txt disallows is never fetched."""
    out: list[Violation] = []
    for r in reqs:
        host_rules = rules.get(r["host"])
        if host_rules is None or is_robots(r):
            continue
        if not host_rules.allowed(f"http://{r['host']}{r['path']}", user_agent):
            out.append(Violation(ViolationKind.DISALLOWED, r["host"], r["path"], r["started_at"],
                                 f"disallowed for {user_agent!r}"))
    return out


def after_robots_failure(reqs: Sequence[RequestRecord]) -> list[Violation]:
    """RFC 9309 §2.3.1.4: while robots.txt answers 5xx (or 429), the whole host is disallowed."""
    out: list[Violation] = []
    for host, rs in _by(reqs, "host").items():
        answers = sorted(((r["ended_at"], r["status"]) for r in rs if _path(r) == "/robots.txt"))
        for r in rs:
            if is_robots(r):
                continue
            known = [status for done, status in answers if done <= r["started_at"]]
            if known and (known[-1] >= 500 or known[-1] == 429):
                out.append(Violation(ViolationKind.ROBOTS_UNAVAILABLE, host, r["path"], r["started_at"],
                                     f"robots.txt last answered {known[-1]}"))
    return out


def retry_after_ignored(reqs: Sequence[RequestRecord], tolerance: float = 0.05) -> list[Violation]:
    """Invariant 1: after a 429/503 with Retry-After, the host is left alone for that long."""
    out: list[Violation] = []
    for host, rs in _by(reqs, "host").items():
        rs = sorted(rs, key=lambda r: r["started_at"])
        for i, r in enumerate(rs):
            wait = r.get("retry_after")
            if wait is None:
                continue
            until = r["ended_at"] + wait
            for later in rs[i + 1:]:
                if later["started_at"] >= until - tolerance:
                    break
                out.append(Violation(ViolationKind.RETRY_AFTER, host, later["path"], later["started_at"],
                                     f"{until - later['started_at']:.3f}s before Retry-After ({wait:g}s) passed"))
    return out


def robots_rules(web: Web, corpus: Corpus | None = None) -> dict[str, RobotsRules | None]:
    """Each host's effective robots rules; None where robots.txt fails (checked from the log instead)."""
    corpus = corpus or default_corpus()
    out: dict[str, RobotsRules | None] = {}
    for host in web.hosts:
        status, body = effective_robots(web, host, corpus)
        if status >= 500 or status == 429:
            out[host.name] = None
        elif 400 <= status < 500:
            out[host.name] = RobotsRules.allow_all()
        else:
            out[host.name] = parse_robots(body)
    return out


def audit_politeness(log: Sequence[Record], web: Web, *, user_agent: str = "*", ip_limit: int = 1,
                     min_delay: float = 0.0, tolerance: float = 0.02,
                     corpus: Corpus | None = None) -> list[Violation]:
    """All politeness checks over a request log (spec: ARCHITECTURE.md §2 invariants 1-2, RFC 9309).

    `min_delay` is the crawler's own floor between requests to a host; a host's Crawl-delay, when
    larger, wins. Returns the violations in the order requests started; an empty list means polite.
    """
    reqs = requests_only(list(log))
    rules = robots_rules(web, corpus)
    delays = {h: max(min_delay, (r.crawl_delay(user_agent) or 0.0) if r else 0.0) for h, r in rules.items()}
    found = (host_overlaps(reqs, tolerance) + ip_concurrency(reqs, ip_limit, tolerance)
             + crawl_delay_gaps(reqs, delays, tolerance) + before_robots(reqs)
             + disallowed_requests(reqs, rules, user_agent) + after_robots_failure(reqs)
             + retry_after_ignored(reqs, max(tolerance, 0.05)))
    return sorted(found, key=lambda v: (v.at, v.kind.value))
