"""`build_web`: a deterministic synthetic web from a seed (names, addresses, pages, robots, flags)."""
from __future__ import annotations

import ipaddress
import random
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from synthweb.corpus import Corpus
from synthweb.model import Behaviour, Host, Page, RobotsVariant, Web, WebPolicy
from synthweb.webdata import webdata_dir

SECTIONS = ("news", "blog", "articles", "2019/05", "2021/11", "products", "guides", "opinion")
WORDS = ("river", "market", "budget", "garden", "summit", "recipe", "league", "museum", "climate",
         "startup", "festival", "election", "harbour", "library", "concert", "vaccine", "rocket")
RULES_DISALLOW = ("/private/", "/tmp/")
WILDCARD_DISALLOW = ("/*?sort=", "/*.pdf$", "/search")
# Variants whose robots.txt carries rules that `Host.disallowed` lists.
_RULE_VARIANTS = {RobotsVariant.RULES: RULES_DISALLOW, RobotsVariant.REDIRECT: RULES_DISALLOW,
                  RobotsVariant.HUGE: ("/private/",), RobotsVariant.WILDCARD: WILDCARD_DISALLOW}
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class HostOverride:
    """Fixes some choices for host number `i` (tests use it to get a host of a known kind)."""

    robots: RobotsVariant | None = None
    behaviours: frozenset[Behaviour] | None = None
    crawl_delay: float | None = None
    sitemap: str | None = None


@lru_cache(maxsize=2)
def default_corpus() -> Corpus:
    """The corpus from the webdata folder (`synthweb.webdata`), loaded once per process."""
    return Corpus(webdata_dir())


def _addresses(policy: WebPolicy) -> Iterator[str]:
    """Loopback addresses from `ip_base` on, skipping .0, .255, 127.0.0.1 and the denied range."""
    denied = ipaddress.ip_network(policy.denied_net)
    addr = ipaddress.ip_address(policy.ip_base)
    end = ipaddress.ip_address("127.255.255.254")
    while addr <= end:
        last = int(addr) & 0xFF
        if last not in (0, 255) and addr not in denied and str(addr) != "127.0.0.1":
            yield str(addr)
        addr += 1
    raise ValueError("ran out of loopback addresses")


def _drawn(seed: int, name: str, signal: str, share: float) -> bool:
    """A per-host choice outside the generator's random stream (so a new knob changes nothing else)."""
    return zlib.crc32(f"{seed}|{name}|{signal}".encode()) < share * 2**32


def _tdmrep_location(seed: int, host: Host, share: float) -> str | None:
    """What a drawn host's tdmrep.json reserves: the whole site, or (one host in two) the section of its
    first article, so the crawl sees both reserved and unreserved pages of one file."""
    if not _drawn(seed, host.name, "tdmrep", share):
        return None
    sections = [p.path.split("/")[1] for p in host.pages if p.path.count("/") >= 2]
    if sections and _drawn(seed, host.name, "tdmrep-part", 0.5):
        return f"/{sections[0]}/"
    return "/"


def _pick(rng: random.Random, mix: tuple[tuple[RobotsVariant, float], ...]) -> RobotsVariant:
    variants, weights = zip(*mix)
    return rng.choices(variants, weights)[0]


def _page_count(rng: random.Random, policy: WebPolicy) -> int:
    """Heavy-tailed site sizes (Pareto, like pages per host on the real web), clipped."""
    return min(policy.max_pages, int(policy.min_pages * rng.paretovariate(1.2)))


def _change_rate(rng: random.Random, policy: WebPolicy, changing: bool) -> float:
    if changing:
        return policy.changing_rate
    shares, per_day = zip(*policy.normal_rates)
    return rng.choices(per_day, shares)[0] / SECONDS_PER_DAY


def _pages(rng: random.Random, policy: WebPolicy, n_sources: int, robots: RobotsVariant,
           behaviours: frozenset[Behaviour]) -> tuple[Page, ...]:
    changing = Behaviour.CHANGING in behaviours
    paths = ["/"]
    n = _page_count(rng, policy)
    for k in range(1, n):
        section = rng.choice(SECTIONS)
        if robots in (RobotsVariant.RULES, RobotsVariant.REDIRECT, RobotsVariant.HUGE) and rng.random() < 0.15:
            section = "private"
        path = f"/{section}/{rng.choice(WORDS)}-{rng.choice(WORDS)}-{k}.html"
        paths.append(path)
    pages = [Page(p, rng.randrange(n_sources), p, _change_rate(rng, policy, changing)) for p in paths]
    if robots is RobotsVariant.WILDCARD:
        pages += [Page(f"/docs/report-{k}.pdf", 0, f"/docs/report-{k}.pdf", 0.0,
                       content_type="application/pdf") for k in (1, 2)]
    if Behaviour.NEAR_DUPLICATES in behaviours:
        for k in (1, 2):
            source = rng.randrange(n_sources)
            first = f"/story/{k}-1.html"
            pages += [Page(f"/story/{k}-{v}.html", source, first, 0.0, near_dup_of=None if v == 1 else first)
                      for v in (1, 2, 3)]
    if Behaviour.EXACT_DUPLICATES in behaviours:
        pages += [Page("/print" + p.path, p.source, p.body_key, p.change_rate) for p in pages[1:3]]
    return tuple(pages)


def _behaviours(rng: random.Random, policy: WebPolicy) -> frozenset[Behaviour]:
    allowed = sorted(policy.behaviours, key=lambda b: b.value)
    if not allowed or rng.random() >= policy.behaviour_share:
        return frozenset()
    return frozenset(rng.sample(allowed, min(len(allowed), rng.choice((1, 1, 2, 3)))))


def _names(rng: random.Random, n_hosts: int, policy: WebPolicy) -> list[tuple[str, str, bool]]:
    """(name, site, shared_hosting) per host; multi-host sites take consecutive numbers."""
    width = max(4, len(str(n_hosts)))
    out: list[tuple[str, str, bool]] = []
    site_no = 0
    while len(out) < n_hosts:
        i = len(out) + 1
        if rng.random() < policy.shared_ip_share:
            name = f"blog-{i}.shared.test"
            out.append((name, name, True))
            continue
        site_no += 1
        site = f"s{site_no:0{width}d}.test"
        size = rng.choice(policy.site_hosts) if rng.random() < policy.multi_host_site_share else 1
        for _ in range(min(size, n_hosts - len(out))):
            out.append((f"h{len(out) + 1:0{width}d}.{site}", site, False))
    return out


def build_web(n_hosts: int, seed: int, policy: WebPolicy | None = None, *,
              corpus: Corpus | None = None,
              overrides: Mapping[int, HostOverride] | None = None) -> Web:
    """Describe a synthetic web of `n_hosts` hosts, the same for the same seed and policy.

    Spec: task brief "synthetic web" (names, 127.x addresses with ~10% shared hosting, heavy-tailed
    sites of real pages, robots variants in real-web shares, hostile behaviour flags).
    """
    if n_hosts < 1:
        raise ValueError(f"n_hosts must be at least 1, got {n_hosts}")
    policy = policy or WebPolicy()
    corpus = corpus or default_corpus()
    overrides = overrides or {}
    rng = random.Random(f"synthweb|{seed}")
    names = _names(rng, n_hosts, policy)
    addresses = _addresses(policy)
    shared_ip: str | None = None
    shared_left = 0
    hosts: list[Host] = []
    for i, (name, site, shared) in enumerate(names):
        if shared:
            if shared_left == 0:
                shared_ip, shared_left = next(addresses), rng.randint(3, 12)
            assert shared_ip is not None
            ip, shared_left = shared_ip, shared_left - 1
        else:
            ip = next(addresses)
        o = overrides.get(i, HostOverride())
        robots = o.robots or _pick(rng, policy.robots_mix)
        behaviours = o.behaviours if o.behaviours is not None else _behaviours(rng, policy)
        delay = o.crawl_delay
        if delay is None and robots in (RobotsVariant.RULES, RobotsVariant.WILDCARD) \
                and rng.random() < policy.crawl_delay_share:
            delay = rng.choice(policy.crawl_delays)
        sitemap = o.sitemap
        if sitemap is None and rng.random() < policy.sitemap_share:
            sitemap = "index" if rng.random() < policy.sitemap_index_share else "urlset"
            # drawn only when asked for, so webs built without it keep their random sequence
            if sitemap == "urlset" and hosts and policy.sitemap_elsewhere_share \
                    and rng.random() < policy.sitemap_elsewhere_share:
                sitemap = "elsewhere"
        spa = _drawn(seed, name, "spa", policy.spa_share)
        if spa:
            sitemap = None   # its pages are reached by running its script, not from a list
        hosts.append(Host(
            name=name, ip=ip, site=site,
            pages=_pages(rng, policy, len(corpus.pages), robots, behaviours),
            robots=robots, crawl_delay=delay,
            disallowed=_RULE_VARIANTS.get(robots, ()),
            sitemap=sitemap, behaviours=behaviours, sitemap_host=hosts[0].name if sitemap == "elsewhere" else None,
            robots_source=rng.randrange(len(corpus.robots_names)) if robots is RobotsVariant.REAL else None,
            gptbot_disallowed=_drawn(seed, name, "gptbot", policy.gptbot_disallow_share),
            noai=_drawn(seed, name, "noai", policy.noai_share), spa=spa,
        ))
        hosts[-1] = replace(hosts[-1], tdmrep_reserved=_tdmrep_location(seed, hosts[-1], policy.tdmrep_share))
    hosts = [_with_redirect_target(h, hosts, rng) for h in hosts]
    missing = tuple(f"gone-{k}.s{k:04d}.test" for k in range(1, max(2, n_hosts // 50) + 1))
    return Web(seed=seed, policy=policy, hosts=tuple(hosts), missing_hosts=missing)


def _with_redirect_target(host: Host, hosts: list[Host], rng: random.Random) -> Host:
    """REDIRECT robots point at /robots-moved.txt on the same host or on another host of the site."""
    if host.robots is not RobotsVariant.REDIRECT:
        return host
    siblings = [h.name for h in hosts if h.site == host.site and h.name != host.name]
    target = rng.choice(siblings) if siblings and rng.random() < 0.5 else host.name
    return replace(host, robots_redirect=target)
