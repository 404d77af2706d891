"""The description of a synthetic web: what exists, where it lives and how it behaves.

A `Web` is pure data built by `generate.build_web` from a seed; the server (`server.py`) only reads
it. Everything a test needs to predict a response (robots variant, page list, behaviour flags,
change rates) is here, so audits and assertions never have to ask the server.
"""
from __future__ import annotations

import enum
import ipaddress
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path


class RobotsVariant(str, enum.Enum):
    """What /robots.txt answers on a host (webdata README gives the real-web shares)."""

    RULES = "rules"                # 200, plain Disallow prefixes that some links hit
    WILDCARD = "wildcard"          # 200, rules with * and $
    REAL = "real"                  # 200, a real robots.txt body from the protego corpus
    NOT_FOUND = "not_found"        # 404: allow all
    SERVER_ERROR = "server_error"  # 503: RFC 9309 says assume complete disallow
    TOO_MANY = "too_many"          # 429 with Retry-After: also complete disallow
    REDIRECT = "redirect"          # 301 to another path on the same host or to another host
    HTML_ERROR = "html_error"      # 200 with an HTML error page (parses to no rules)
    HUGE = "huge"                  # 200, over 500 KiB, a rule near the end
    EMPTY = "empty"                # 200, empty body: allow all
    RULE_HEAVY = "rule_heavy"      # 200, under 500 KiB of costly wildcard rules under /a that match none of its pages


class Behaviour(str, enum.Enum):
    """Hostile or unusual behaviours a host can have; each is a flag on the host."""

    CALENDAR_TRAP = "calendar_trap"    # /calendar/YYYY/MM/ links to next and previous month, forever
    SESSION_TRAP = "session_trap"      # every link carries a fresh ?sid=, so URLs never repeat
    DEEP_TRAP = "deep_trap"            # /deep/a/b/c/... each page links one level deeper
    SLOW_DRIP = "slow_drip"            # /slow/drip.html trickles its body in small chunks
    SLOW_FIRST_BYTE = "slow_first_byte"  # /slow/first-byte.html waits before the status line
    HUGE_PAGE = "huge_page"            # /huge.html is `huge_page_bytes` long
    GZIP_BOMB = "gzip_bomb"            # /bomb.html is small gzip that inflates to `gzip_bomb_bytes`
    REDIRECTS = "redirects"            # /loop/a <-> /loop/b forever, /chain/N counts down to a page
    RATE_LIMITED = "rate_limited"      # every `rate_limit_every`-th page request answers 429 + Retry-After
    FLAKY_5XX = "flaky_5xx"            # every `flaky_every`-th page request answers 500 or 503
    SOFT_404 = "soft_404"              # any unknown path answers 200 with a "not found" page
    NEAR_DUPLICATES = "near_duplicates"  # /story/N-K.html: one article, a timestamp and an ad differ
    EXACT_DUPLICATES = "exact_duplicates"  # /print/<path> serves the same bytes as <path>
    CHANGING = "changing"              # pages change fast over the simulated clock
    SSRF_BAIT = "ssrf_bait"            # links and redirects to the denied range and 169.254.169.254
    NESTING_BOMB = "nesting_bomb"      # /nested/<tag>.html: a few KB of gzip holding `nesting_bomb_depth` nested tags
    BROTLI_BOMB = "brotli_bomb"        # /brotli-bomb.html: a few hundred bytes of brotli inflating to `brotli_bomb_bytes`


ALL_BEHAVIOURS: frozenset[Behaviour] = frozenset(Behaviour)
# Behaviours handed out unless a policy names its own. The parser bombs and the brotli bomb are asked for
# by name, so the webs of the existing tests and benchmarks keep their hosts.
DEFAULT_BEHAVIOURS: frozenset[Behaviour] = ALL_BEHAVIOURS - {Behaviour.NESTING_BOMB, Behaviour.BROTLI_BOMB}
# The tags a nesting bomb nests (synthweb/render.py `nesting_bomb`): blocks, lists and inline ones.
NESTING_BOMB_TAGS = ("div", "section", "ul", "blockquote", "span")
METADATA_IP = "169.254.169.254"

# Shares close to the real corpus (webdata README: 3.3% HTML error pages, 18% Crawl-delay,
# 47% wildcards, CC fetch stats); the error variants are raised a little so small webs have some.
# RULE_HEAVY is asked for by a mix of its own, so the webs built with this mix keep their hosts.
DEFAULT_ROBOTS_MIX: tuple[tuple[RobotsVariant, float], ...] = (
    (RobotsVariant.RULES, 0.36),
    (RobotsVariant.WILDCARD, 0.22),
    (RobotsVariant.REAL, 0.08),
    (RobotsVariant.NOT_FOUND, 0.14),
    (RobotsVariant.SERVER_ERROR, 0.03),
    (RobotsVariant.TOO_MANY, 0.02),
    (RobotsVariant.REDIRECT, 0.05),
    (RobotsVariant.HTML_ERROR, 0.04),
    (RobotsVariant.HUGE, 0.01),
    (RobotsVariant.EMPTY, 0.05),
)


@dataclass(frozen=True)
class WebPolicy:
    """Knobs of `build_web` and of the server; defaults give a realistic, test-friendly web.

    Shares are fractions of hosts (or of links); delays are seconds of wall time.
    """

    ip_base: str = "127.1.0.1"               # first address handed out
    denied_net: str = "127.255.0.0/16"       # kept free of hosts: the crawler's SSRF tests deny it
    shared_ip_share: float = 0.10            # hosts that share an address with others
    min_pages: int = 5
    max_pages: int = 50
    multi_host_site_share: float = 0.15      # sites with 2-3 hosts (www., blog., news.)
    site_hosts: tuple[int, ...] = (2, 3)     # hosts of a multi-host site, one of these at random
    same_host_link_share: float = 0.80
    same_site_link_share: float = 0.03
    missing_host_link_share: float = 0.01    # links to hosts that do not exist
    broken_link_share: float = 0.02          # same-host links to paths that 404
    # at most this many of a page's link slots are links, the rest `href="#"` (0: every slot): the same
    # real pages with fewer links, the web on which a crawler's cost per link weighs less
    links_per_page: int = 0
    sitemap_share: float = 0.52              # hosts with a sitemap listed in robots.txt
    sitemap_index_share: float = 0.3         # of those, served as an index of two sitemaps
    sitemap_elsewhere_share: float = 0.0     # of the others, served by the first host (cross-submitted)
    crawl_delay_share: float = 0.18          # rules hosts whose robots.txt sets Crawl-delay
    crawl_delays: tuple[float, ...] = (0.5, 1.0, 2.0)
    robots_mix: tuple[tuple[RobotsVariant, float], ...] = DEFAULT_ROBOTS_MIX
    behaviour_share: float = 0.15            # hosts with at least one hostile behaviour
    # TDM opt-outs, off by default; hosts are picked by a hash of seed and name, not the
    # generator's random stream, so turning them on leaves the rest of the web unchanged
    gptbot_disallow_share: float = 0.0       # hosts whose rules robots.txt also disallows GPTBot everything
    noai_share: float = 0.0                  # hosts whose HTML pages send `X-Robots-Tag: noai`
    tdmrep_share: float = 0.0                # hosts serving a /.well-known/tdmrep.json reserving all or a section
    spa_share: float = 0.0                   # single-page-app hosts: content and links only after scripts run (synthweb.spa)
    behaviours: frozenset[Behaviour] = DEFAULT_BEHAVIOURS  # which behaviours may be handed out
    huge_page_bytes: int = 20 * 1024 * 1024
    gzip_bomb_bytes: int = 200 * 1024 * 1024
    brotli_bomb_bytes: int = 200 * 1024 * 1024
    nesting_bomb_depth: int = 1_000_000
    drip_chunk_bytes: int = 256
    drip_interval: float = 0.5
    drip_chunks: int = 20
    first_byte_delay: float = 6.0
    rate_limit_every: int = 4
    retry_after_seconds: int = 2             # Retry-After on rate-limited pages
    robots_retry_after: int = 60             # Retry-After on a robots.txt that answers 429
    flaky_every: int = 3
    redirect_chain_length: int = 8
    deep_trap_fanout: int = 2
    clock_speed: float = 1.0                 # simulated seconds per wall second
    # time.monotonic() of simulated time 0 (one clock for every process on Linux), so a benchmark can
    # tell which version each request got; None: when the server starts
    clock_origin: float | None = None
    changing_rate: float = 1 / 60.0          # changes per simulated second on CHANGING hosts
    normal_rates: tuple[tuple[float, float], ...] = (  # (share of pages, changes per simulated day)
        (0.30, 0.0), (0.23, 1.0), (0.17, 1 / 7), (0.30, 1 / 30))
    sim_epoch: int = 1_700_000_000           # simulated time 0, as Unix seconds (Last-Modified base)

    def __post_init__(self) -> None:
        shares = {
            "shared_ip_share": self.shared_ip_share,
            "multi_host_site_share": self.multi_host_site_share,
            "same_host_link_share": self.same_host_link_share,
            "same_site_link_share": self.same_site_link_share,
            "missing_host_link_share": self.missing_host_link_share,
            "broken_link_share": self.broken_link_share,
            "sitemap_share": self.sitemap_share,
            "sitemap_index_share": self.sitemap_index_share,
            "sitemap_elsewhere_share": self.sitemap_elsewhere_share,
            "crawl_delay_share": self.crawl_delay_share,
            "behaviour_share": self.behaviour_share,
            "gptbot_disallow_share": self.gptbot_disallow_share,
            "noai_share": self.noai_share,
            "tdmrep_share": self.tdmrep_share,
            "spa_share": self.spa_share,
        }
        for name, value in shares.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.same_host_link_share + self.same_site_link_share + self.missing_host_link_share > 1.0:
            raise ValueError("same-host, same-site and missing-host link shares add up to more than 1")
        if isinstance(self.links_per_page, bool) or not isinstance(self.links_per_page, int) or self.links_per_page < 0:
            raise ValueError(f"links_per_page must be a whole number >= 0 (0: every slot), got {self.links_per_page!r}")
        if not 1 <= self.min_pages <= self.max_pages:
            raise ValueError(f"need 1 <= min_pages <= max_pages, got {self.min_pages}, {self.max_pages}")
        base = ipaddress.ip_address(self.ip_base)
        denied = ipaddress.ip_network(self.denied_net)
        loopback = ipaddress.ip_network("127.0.0.0/8")
        if base not in loopback or not denied.subnet_of(loopback):
            raise ValueError("ip_base and denied_net must lie inside 127.0.0.0/8 (loopback only)")
        if base in denied:
            raise ValueError(f"ip_base {base} lies inside denied_net {denied}")
        if not self.robots_mix or any(w < 0 for _, w in self.robots_mix) or sum(w for _, w in self.robots_mix) <= 0:
            raise ValueError("robots_mix needs non-negative weights with a positive sum")
        if not self.site_hosts or any(n < 1 for n in self.site_hosts):
            raise ValueError(f"site_hosts must be host counts >= 1, got {self.site_hosts}")
        if any(d <= 0 for d in self.crawl_delays) or not self.crawl_delays:
            raise ValueError("crawl_delays must be positive seconds")
        if self.clock_speed <= 0:
            raise ValueError(f"clock_speed must be positive, got {self.clock_speed}")
        for name in ("huge_page_bytes", "gzip_bomb_bytes", "brotli_bomb_bytes", "nesting_bomb_depth",
                     "drip_chunk_bytes", "drip_chunks", "rate_limit_every", "flaky_every", "redirect_chain_length",
                     "deep_trap_fanout"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.drip_interval < 0 or self.first_byte_delay < 0 or self.retry_after_seconds < 0 \
                or self.robots_retry_after < 0:
            raise ValueError("delays must not be negative")
        if abs(sum(s for s, _ in self.normal_rates) - 1.0) > 1e-6:
            raise ValueError("normal_rates shares must add up to 1")


@dataclass(frozen=True)
class Page:
    """One page of a host: where its body comes from and how often it changes."""

    path: str
    source: int            # index into the corpus of real pages
    body_key: str          # pages with the same key on a host render the same bytes (exact duplicates)
    change_rate: float     # changes per simulated second (Poisson), 0 = never
    near_dup_of: str | None = None  # path of the article this page nearly duplicates
    content_type: str = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Host:
    """One host name on one loopback address."""

    name: str
    ip: str
    site: str                      # hosts with the same site link to each other (~3% of links)
    pages: tuple[Page, ...]
    robots: RobotsVariant
    crawl_delay: float | None      # what robots.txt declares (rules/wildcard variants only)
    disallowed: tuple[str, ...]    # path prefixes or patterns robots.txt disallows for every agent
    sitemap: str | None            # "urlset", "index" or "elsewhere", listed in robots.txt when it has rules
    behaviours: frozenset[Behaviour]
    robots_source: int | None = None   # index into the real robots corpus (REAL variant)
    robots_redirect: str | None = None  # absolute path or host name the REDIRECT variant points at
    gptbot_disallowed: bool = False    # its rules body (RULES, REDIRECT target) has `User-agent: GPTBot / Disallow: /`
    noai: bool = False                 # its HTML pages (but session-trap ones) send `X-Robots-Tag: noai`
    tdmrep_reserved: str | None = None  # the location its tdmrep.json reserves ("/" or "/<section>/"); None: no file
    sitemap_host: str | None = None    # who serves its sitemap ("elsewhere": another host, at /sitemaps/<name>.xml)
    spa: bool = False                  # a single-page app (synthweb.spa): no sitemap, links in only to "/"

    @cached_property
    def page_map(self) -> dict[str, Page]:
        return {p.path: p for p in self.pages}


@dataclass(frozen=True)
class Web:
    """A whole synthetic web: hosts by name, and the policy it was built with."""

    seed: int
    policy: WebPolicy
    hosts: tuple[Host, ...]
    missing_hosts: tuple[str, ...] = field(default=())  # names linked to but served nowhere

    @cached_property
    def by_name(self) -> dict[str, Host]:
        return {h.name: h for h in self.hosts}

    @cached_property
    def by_ip(self) -> dict[str, tuple[Host, ...]]:
        groups: dict[str, list[Host]] = {}
        for h in self.hosts:
            groups.setdefault(h.ip, []).append(h)
        return {ip: tuple(hs) for ip, hs in groups.items()}

    @cached_property
    def by_site(self) -> dict[str, tuple[Host, ...]]:
        groups: dict[str, list[Host]] = {}
        for h in self.hosts:
            groups.setdefault(h.site, []).append(h)
        return {s: tuple(hs) for s, hs in groups.items()}

    def ips(self) -> list[str]:
        """Distinct addresses to listen on, in a stable order."""
        return list(self.by_ip)


def base_url(host: str, port: int) -> str:
    """`http://host[:port]` as links in the synthetic web spell it (port omitted when 80)."""
    return f"http://{host}" if port == 80 else f"http://{host}:{port}"


def write_host_map(web: Web, path: Path, omit: Collection[str] = ()) -> None:
    """Write the crawler's `--host-map` file: one `hostname ip` line per host but those in `omit`, which a
    crawler then has to resolve through DNS (a name `omit` gives that is not a host is an error)."""
    unknown = set(omit) - set(web.by_name)
    if unknown:
        raise ValueError(f"not hosts of the web, cannot be left out of the host map: {sorted(unknown)}")
    path.write_text("".join(f"{h.name} {h.ip}\n" for h in web.hosts if h.name not in omit), encoding="ascii")


def write_seeds(web: Web, path: Path, port: int, limit: int | None = None) -> None:
    """Write a seeds file: the home page URL of each host (the first `limit` hosts if given)."""
    hosts = web.hosts if limit is None else web.hosts[:limit]
    path.write_text("".join(f"{base_url(h.name, port)}/\n" for h in hosts), encoding="ascii")


def policy_from_dict(values: dict[str, object]) -> WebPolicy:
    """A `WebPolicy` from JSON-style overrides; an unknown key is an error, never ignored."""
    unknown = set(values) - set(WebPolicy.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown WebPolicy keys: {sorted(unknown)}")
    v: dict[str, object] = dict(values)
    if "behaviours" in v:
        v["behaviours"] = frozenset(Behaviour(b) for b in v["behaviours"])  # type: ignore[attr-defined]
    if "robots_mix" in v:
        v["robots_mix"] = tuple((RobotsVariant(n), float(w)) for n, w in v["robots_mix"])  # type: ignore[attr-defined]
    for name in ("crawl_delays", "site_hosts"):
        if name in v:
            v[name] = tuple(v[name])  # type: ignore[call-overload]
    if "normal_rates" in v:
        v["normal_rates"] = tuple((float(s), float(r)) for s, r in v["normal_rates"])  # type: ignore[attr-defined]
    return WebPolicy(**v)  # type: ignore[arg-type]


def policy_to_dict(policy: WebPolicy) -> dict[str, object]:
    """The JSON-compatible form read back by `policy_from_dict` (for the subprocess server)."""
    out: dict[str, object] = {}
    for name in WebPolicy.__dataclass_fields__:
        value = getattr(policy, name)
        if name == "behaviours":
            value = sorted(b.value for b in value)
        elif name == "robots_mix":
            value = [[r.value, w] for r, w in value]
        elif isinstance(value, tuple):
            value = [list(x) if isinstance(x, tuple) else x for x in value]
        out[name] = value
    return out
