"""Which fetched pages the rendering tier renders, and why (decision 3900).

Rendering a page in a headless browser costs far more than fetching it, so the tier is selective: the
plain pipeline parses every page first, and a page goes on to the renderer only for a reason:

- `host_always`: the host's render mode is `always` (operator control or configuration);
- `app_root`: the page carries a single-page-app mount point or framework marker (an empty
  `<div id="root">` or `id="app"`, Next.js's `__NEXT_DATA__`, Nuxt's `__NUXT__`, Angular's `ng-version`,
  `<app-root>`) and little visible text;
- `near_empty`: its visible text is shorter than `near_empty_chars` while it loads script bundles;
- `noscript`: a `<noscript>` element asks for JavaScript (`enable JavaScript`, `requires JavaScript`).

A host in mode `never` is never rendered; `auto` (the default) uses the page's signals. Over the whole
crawl at most `max_share` of the pages seen are rendered (`ShareCap`); a page over the cap is counted
`share_cap` and stays as parsed. Signals are read from the first `scan_bytes` of the body by regular
expressions, and only for pages whose visible text is short or whose host says `always`, so the plain
path pays one length comparison per page.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from udfs.render_policy import DEFAULT_RENDER_POLICY, RenderPolicy

RENDER_MODES: Final = ("auto", "always", "never")
REASONS: Final = ("host_always", "app_root", "near_empty", "noscript")
OVER_CAP: Final = "share_cap"

_SCRIPT_SRC = re.compile(rb"<script\b[^>]*\bsrc\s*=", re.IGNORECASE)
_APP_ROOT = re.compile(
    rb"<div\b[^>]*\bid\s*=\s*[\"']?(?:root|app|__next|__nuxt)[\"'\s>][^>]*>\s*</div>"
    rb"|__NEXT_DATA__|window\.__NUXT__|\bng-version\s*=|<app-root\b",
    re.IGNORECASE)
_NOSCRIPT_ASKS = re.compile(
    rb"<noscript\b[^>]*>(?:(?!</noscript).){0,500}?"
    rb"(?:enable\s+javascript|javascript\s+(?:is\s+)?(?:required|disabled)|requires\s+javascript"
    rb"|need\s+(?:to\s+)?(?:enable\s+)?javascript)",
    re.IGNORECASE | re.DOTALL)




@dataclass(frozen=True)
class PageSignals:
    """What a page's markup says about needing its scripts run."""

    scripts: int = 0          # <script src=...> elements in the scanned bytes
    app_root: bool = False    # a single-page-app mount point or framework marker
    noscript_asks: bool = False


def check_mode(mode: str) -> str:
    """`mode` if it is a render mode; ValueError naming the modes otherwise."""
    if mode not in RENDER_MODES:
        raise ValueError(f"render mode must be one of {', '.join(RENDER_MODES)}, not {mode!r}")
    return mode


def page_signals(body: bytes, policy: RenderPolicy = DEFAULT_RENDER_POLICY) -> PageSignals:
    """The signals found in the first `policy.scan_bytes` of `body`."""
    head = body[:policy.scan_bytes]
    return PageSignals(scripts=len(_SCRIPT_SRC.findall(head)), app_root=_APP_ROOT.search(head) is not None,
                       noscript_asks=_NOSCRIPT_ASKS.search(head) is not None)


def render_reason(text_chars: int, body: bytes, mode: str = "auto",
                  policy: RenderPolicy = DEFAULT_RENDER_POLICY) -> str | None:
    """Why a parsed HTML page with `text_chars` of visible text should be rendered; None: it should not.
    The body is scanned only when the text is short (or the host says `always`)."""
    if not policy.enabled or mode == "never":
        return None
    if mode == "always":
        return "host_always"
    if text_chars >= policy.near_empty_chars:
        return None
    signals = page_signals(body, policy)
    if signals.app_root:
        return "app_root"
    if signals.scripts:
        return "near_empty"
    if signals.noscript_asks:
        return "noscript"
    return None


class ShareCap:
    """Keeps the rendered pages at most `max_share` of the pages seen: a page may be rendered while
    (rendered + 1) <= max_share * seen, plus one, so the first chosen page of a crawl is not refused."""

    def __init__(self, max_share: float) -> None:
        self.max_share = max_share
        self.seen = 0
        self.rendered = 0

    def saw(self, pages: int = 1) -> None:
        self.seen += pages

    def take(self) -> bool:
        """Whether one more page may be rendered now (and if so it counts as rendered)."""
        if self.rendered + 1 > self.max_share * self.seen + 1:
            return False
        self.rendered += 1
        return True
