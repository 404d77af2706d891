"""What a render does with each request its browser makes (decision 3901).

The browser has no network of its own: every request it makes is paused and judged here. The page's
own document is answered with the response the crawl already fetched. Any other request is refused
for a named reason, or fetched through the crawler's gate (robots.txt, per-host and per-address
politeness, the SSRF guard), after the sub-resource cache had no fresh copy:

- `scheme`: not http or https;
- `method`: not GET (a render reads, it never submits);
- `type`: a resource type the tier never needs (`RenderPolicy.refused_types`: images, media, beacons),
  or the site's icon (`/favicon.ico`, which the browser asks for as type `Other`);
- `tracker`: a host of `RenderPolicy.tracker_hosts` or one of its subdomains;
- `third_party`: with `same_site_only`, a host outside the page's registrable domain;
- `budget`: the render already made `max_subresources` requests.

A request the browser may make then passes the lease's own gate (`lease_refusal`): the render holds its
page's host lease, so only that host is asked (`other_host`: another host waits for its own frontier's
lease), and only where the host's robots.txt lets our agent (`robots`); the fetcher adds the host's
delay between requests and the SSRF guard.
"""
from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from udfs.render_policy import DEFAULT_RENDER_POLICY, RenderPolicy
from udfs.robots import RobotsRules
from udfs.urls import host_key, normalize_url, registrable_domain

FETCH: Final = "fetch"
# The FetchRequest kind of a render's own request (a script, a style, an API answer): fetched like a
# page, but of any content type.
SUBRESOURCE_KIND: Final = "subresource"
REFUSALS: Final = ("scheme", "method", "type", "tracker", "third_party", "budget")
LEASE_REFUSALS: Final = ("other_host", "robots")
CACHEABLE_TYPES: Final = frozenset({"Script", "Stylesheet", "Font"})


def request_verdict(url: str, method: str, resource_type: str, page_url: str, made: int,
                    policy: RenderPolicy = DEFAULT_RENDER_POLICY) -> str:
    """FETCH, or the reason the request is refused; `made` is how many the render has fetched so far."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "scheme"
    if method.upper() != "GET":
        return "method"
    if resource_type in policy.refused_types or parts.path == "/favicon.ico":
        return "type"
    host = parts.hostname.lower().rstrip(".")
    if any(host == t or host.endswith("." + t) for t in policy.tracker_hosts):
        return "tracker"
    if policy.same_site_only:
        page_host = (urlsplit(page_url).hostname or "").lower().rstrip(".")
        if host != page_host and registrable_domain(host) != registrable_domain(page_host):
            return "third_party"
    if made >= policy.max_subresources:
        return "budget"
    return FETCH


def cacheable(resource_type: str) -> bool:
    """Whether a sub-resource of this type is shared across pages (scripts, styles, fonts) and so kept
    in the sub-resource cache."""
    return resource_type in CACHEABLE_TYPES


def lease_refusal(url: str, lease_host: str, rules: RobotsRules | None, user_agent: str) -> str | None:
    """Why the render of a page leased for `lease_host` (the frontier's host key: host and non-default
    port) may not fetch `url` itself, or None: another host (`other_host`), or one robots.txt keeps our
    agent off (`robots`; a rules object that raises refuses). `rules` None: the host has no rules (no robots.txt), so nothing is kept off."""
    normal = normalize_url(url)
    try:
        if normal is None or host_key(normal) != lease_host:
            return "other_host"
    except ValueError:
        return "other_host"
    if rules is None:
        return None
    try:
        return None if rules.check(url, user_agent).allowed else "robots"
    except Exception:  # noqa: BLE001 - a hostile robots.txt refuses, never fails the render
        return "robots"
