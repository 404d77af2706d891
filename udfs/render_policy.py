"""The rendering tier's settings (config section `[render]`, decision 3900)."""
from __future__ import annotations

from dataclasses import dataclass

# Chromium's resource types (DevTools protocol, Network.ResourceType) a render never asks for: the
# page's text and links do not depend on them.
DEFAULT_REFUSED_TYPES = ("Image", "Media", "Ping", "CSPViolationReport", "WebSocket", "EventSource", "Manifest",
                         "SignedExchange", "Prefetch")
# Hosts (and their subdomains) of analytics and advertising scripts: refused, whoever embeds them.
DEFAULT_TRACKER_HOSTS = ("google-analytics.com", "googletagmanager.com", "doubleclick.net", "googlesyndication.com",
                         "facebook.net", "connect.facebook.net", "hotjar.com", "segment.io", "segment.com",
                         "scorecardresearch.com", "quantserve.com", "adservice.google.com", "criteo.com",
                         "taboola.com", "outbrain.com", "newrelic.com", "nr-data.net", "mixpanel.com")


@dataclass(frozen=True)
class RenderPolicy:
    """The rendering tier (config section `[render]`); defaults documented here.

    enabled: the tier renders the pages it selects (False: no page is rendered, none is even looked at).
    max_share: at most this share of the pages seen in the crawl are rendered (0.05).
    near_empty_chars: visible text shorter than this, beside at least one script bundle, makes a page
        near-empty (200 characters).
    scan_bytes: how much of a body the selection's signals are looked for in (256 KiB).
    page_timeout_s: a render ends after this, whatever it has loaded (15 s).
    settle_ms: a page counts as loaded once no request of it has been pending for this long (500 ms).
    scroll_steps: times the page is scrolled to its end after loading, for content loaded on scroll (2).
    max_subresources: requests a render may make besides its page; past them every request is refused (50).
    max_subresource_bytes: the largest sub-resource body a render accepts (5 MiB).
    max_dom_bytes: the rendered DOM is cut to this (5 MiB).
    refused_types: resource types never fetched (images, media, beacons, sockets...).
    tracker_hosts: hosts whose requests are refused, with their subdomains (analytics, advertising).
    same_site_only: only the page's own host and hosts of its registrable domain are asked (True); other
        hosts' scripts are refused.
    max_concurrent: renders a fetch subtask runs at once, in its one browser (2).
    """

    enabled: bool = False
    max_share: float = 0.05
    near_empty_chars: int = 200
    scan_bytes: int = 256 * 1024
    page_timeout_s: float = 15.0
    settle_ms: int = 500
    scroll_steps: int = 2
    max_subresources: int = 50
    max_subresource_bytes: int = 5 * 1024 * 1024
    max_dom_bytes: int = 5 * 1024 * 1024
    refused_types: tuple[str, ...] = DEFAULT_REFUSED_TYPES
    tracker_hosts: tuple[str, ...] = DEFAULT_TRACKER_HOSTS
    same_site_only: bool = True
    max_concurrent: int = 2

    def __post_init__(self) -> None:
        for name in ("enabled", "same_site_only"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"render.{name} must be true or false, not {getattr(self, name)!r}")
        if isinstance(self.max_share, bool) or not isinstance(self.max_share, (int, float)) \
                or not 0.0 <= self.max_share <= 1.0:
            raise ValueError(f"render.max_share must be a share within [0, 1], not {self.max_share!r}")
        if isinstance(self.page_timeout_s, bool) or not isinstance(self.page_timeout_s, (int, float)) \
                or not 0 < self.page_timeout_s <= 300:
            raise ValueError(f"render.page_timeout_s must be seconds within (0, 300], not {self.page_timeout_s!r}")
        for name, low in (("near_empty_chars", 0), ("scan_bytes", 1024), ("settle_ms", 0), ("scroll_steps", 0),
                          ("max_subresources", 0), ("max_subresource_bytes", 1024), ("max_dom_bytes", 1024),
                          ("max_concurrent", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"render.{name} must be a whole number >= {low}, not {value!r}")
        for name in ("refused_types", "tracker_hosts"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"render.{name} must be a list of names, not {value!r}")


DEFAULT_RENDER_POLICY = RenderPolicy()
