"""Where each link slot of a page points: the synthetic web's link graph, derived, not stored.

The same (seed, host, body_key) always yields the same links, so exact duplicates render the same
bytes and a test can recompute what the server sent. Shares follow the webdata statistics: ~80% same
host, ~3% another host of the same site, the rest other hosts, a few to hosts that do not exist.
"""
from __future__ import annotations

import ipaddress
import random

from synthweb.model import METADATA_IP, NESTING_BOMB_TAGS, Behaviour, Host, Page, RobotsVariant, Web, base_url

SSRF_METADATA_URL = f"http://{METADATA_IP}/latest/meta-data/"
SPECIAL_SHARE = 0.05   # same-host links that lead to a trap or hostile page on such hosts
ABSOLUTE_SHARE = 0.4   # same-host links written as absolute URLs rather than paths


def denied_bait_url(web: Web) -> str:
    """A URL into the denied loopback range (SSRF bait)."""
    net = ipaddress.ip_network(web.policy.denied_net)
    return f"http://{net.network_address + 1}/admin/"


def entrances(host: Host, web: Web) -> list[str]:
    """Same-host paths that lead into the host's traps and hostile pages."""
    b = host.behaviours
    out: list[str] = []
    if Behaviour.CALENDAR_TRAP in b:
        out.append("/calendar/2024/01/")
    if Behaviour.DEEP_TRAP in b:
        out.append("/deep/a/")
    if Behaviour.SLOW_DRIP in b:
        out.append("/slow/drip.html")
    if Behaviour.SLOW_FIRST_BYTE in b:
        out.append("/slow/first-byte.html")
    if Behaviour.HUGE_PAGE in b:
        out.append("/huge.html")
    if Behaviour.GZIP_BOMB in b:
        out.append("/bomb.html")
    if Behaviour.BROTLI_BOMB in b:
        out.append("/brotli-bomb.html")
    if Behaviour.NESTING_BOMB in b:
        out += [f"/nested/{tag}.html" for tag in NESTING_BOMB_TAGS]
    if Behaviour.REDIRECTS in b:
        out += ["/loop/a", f"/chain/{web.policy.redirect_chain_length}"]
    if Behaviour.SSRF_BAIT in b:
        out += ["/go/metadata", "/go/denied"]
    return out


def page_links(web: Web, host: Host, page: Page, n: int, port: int) -> list[str]:
    """The `n` link targets of `page` (spec: task brief "links rewritten into the synthetic web"); past
    `links_per_page` (when set) each is `#`, a link to the page itself.

    Written as one flat loop over `rng.random()` draws: it runs for every page render.
    """
    p = web.policy
    linked = min(n, p.links_per_page) if p.links_per_page else n
    rnd = random.Random(f"links|{web.seed}|{host.name}|{page.body_key}").random
    home = page.path == "/"
    special = entrances(host, web)
    bait = [SSRF_METADATA_URL, denied_bait_url(web)] if Behaviour.SSRF_BAIT in host.behaviours else []
    siblings = [h for h in web.by_site[host.site] if h.name != host.name]
    own = base_url(host.name, port)
    pages = host.pages
    hosts = web.hosts
    wildcard = host.robots is RobotsVariant.WILDCARD
    same = p.same_host_link_share
    site = same + (p.same_site_link_share if siblings else 0.0)
    missing = site + p.missing_host_link_share
    broken = p.broken_link_share / max(same, 1e-9)
    special_share = SPECIAL_SHARE if special else 0.0
    out: list[str] = []
    cursor = 0
    for i in range(linked):
        if home and i < len(special):
            out.append(special[i])
            continue
        if i < len(bait):
            out.append(bait[i])
            continue
        r = rnd()
        if r < same:
            q = rnd()
            if q < broken:
                path = f"/missing-{int(rnd() * 1000)}.html"
            elif q < broken + special_share:
                path = special[int(rnd() * len(special))]
            else:
                if home:  # the home page walks the site so that every page is reachable
                    path, cursor = pages[cursor % len(pages)].path, cursor + 1
                else:
                    path = pages[int(rnd() * len(pages))].path
                if wildcard:
                    w = rnd()
                    if w < 0.1:
                        path += "?sort=asc"
                    elif w < 0.13:
                        path = f"/search?q={int(w * 1000)}"
            out.append(own + path if rnd() < ABSOLUTE_SHARE else path)
        elif r < site:
            other = siblings[int(rnd() * len(siblings))]
            path = other.pages[int(rnd() * len(other.pages))].path
            out.append(base_url(other.name, port) + ("/" if other.spa else path))
        elif r < missing:
            out.append(base_url(web.missing_hosts[int(rnd() * len(web.missing_hosts))], port) + "/")
        else:
            # Squaring skews choices toward low numbers: a few popular hosts get many in-links.
            other = hosts[int(len(hosts) * rnd() ** 2)]
            path = "/" if rnd() < 0.5 else other.pages[int(rnd() * len(other.pages))].path
            out.append(base_url(other.name, port) + ("/" if other.spa else path))
    out += ["#"] * (n - linked)
    return out


def with_session(url: str, sid: str) -> str:
    """Append a session id to a same-host link (the session-id churn trap)."""
    return f"{url}{'&' if '?' in url else '?'}sid={sid}"
