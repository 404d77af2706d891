"""What the parse step takes from one fetched page: links, canonical, robots directives, refresh, text.

`extract(url, headers, body)` is pure and never raises: hostile bytes give an empty or partial
`Extraction`, and an unexpected failure inside the parser comes back as `Extraction.error`
(errors as data) rather than failing the Flink task. HTML is parsed with lexbor (selectolax),
chosen by measurement (docs/decisions/0300). Links are resolved against `<base href>` and
normalised by `udfs.urls.normalize_url`; the frontier decides what to do with them.
"""
from __future__ import annotations

import codecs
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from selectolax.lexbor import LexborHTMLParser, LexborNode

from udfs.html_limits import document_cut
from udfs.optout import meta_names
from udfs.text import decode_html, detect_language, primary_language, squash
from udfs.urls import DEFAULT_URL_POLICY, normalize_url, written_order

if TYPE_CHECKING:
    from udfs.urls import UrlPolicy

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class ExtractPolicy:
    """The `[extract]` section: what the parse step keeps from a page. Defaults are the documented ones."""

    # Our robots token: agent-specific `X-Robots-Tag: <token>: noindex` and `<meta name="<token>">`
    # apply only when they name it (case-insensitive), besides the generic ones for every robot.
    user_agent_token: str = "flinkcrawler"
    # Unique links kept per page, in document order (StormCrawler `parser.maxoutlinks` style cap).
    max_links: int = 1000
    # Anchor text kept per link, in characters.
    max_anchor_chars: int = 100
    # Title kept, in characters.
    max_title_chars: int = 300
    # Main text kept, in characters: enough for SimHash and an index, bounded for the topic.
    max_text_chars: int = 200_000
    # `<frame src>` is navigation (framesets) and is followed; `<iframe src>` is mostly embeds and ads.
    follow_frames: bool = True
    follow_iframes: bool = False
    # Guess the language (py3langid) when neither `<html lang>` nor Content-Language names it.
    detect_language: bool = True
    # `<meta name content>` pairs kept for the opt-out decision (`Extraction.meta`), first ones first.
    max_meta: int = 32
    # The tree is built of the text before the first tag that would nest deeper than `max_depth` elements
    # (a browser's own cap is 512) or open more than `max_elements`: a tree builder's cost grows with
    # elements times depth, so these two bound it (udfs.html_limits, decision 3700).
    max_depth: int = 512
    max_elements: int = 50_000
    # What extracting one page may cost, enforced by the parse operator's sandboxed worker process
    # (operators/sandbox.py, decision 3701): CPU seconds, and MiB of memory above the worker's own.
    # A page over either ends as a `parse_limit` outcome: archived, not published, charged to its host.
    cpu_budget_s: float = 1.0
    memory_budget_mb: int = 1024
    # false: extract in the parse operator's own process, with no CPU or memory budget (tests, benchmarks).
    sandbox: bool = True

    def __post_init__(self) -> None:
        token = self.user_agent_token
        if not token or not re.fullmatch(r"[A-Za-z0-9_-]+", token):
            raise ValueError(
                f"user_agent_token must be a product token of letters, digits, '_' or '-' (RFC 9309 §2.2.1), got {token!r}"
            )
        for name in ("max_links", "max_anchor_chars", "max_title_chars", "max_text_chars", "max_meta"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        for name in ("max_depth", "max_elements"):
            if getattr(self, name) < 32:
                raise ValueError(f"extract.{name} must be at least 32 (real pages nest about 30 deep), "
                                 f"got {getattr(self, name)}")
        if not 0.05 <= self.cpu_budget_s <= 600:
            raise ValueError(f"extract.cpu_budget_s must be within [0.05, 600] seconds, got {self.cpu_budget_s!r}")
        if not 64 <= self.memory_budget_mb <= 65536:
            raise ValueError(f"extract.memory_budget_mb must be within [64, 65536], got {self.memory_budget_mb!r}")


DEFAULT_POLICY = ExtractPolicy()
# The meta names the default opt-out policy reads (udfs.optout.meta_names).
DEFAULT_META_NAMES = meta_names()
# Characters of a kept meta `content`: directive lists and TDMRep values are short; a page cannot
# make the parse step carry a megabyte attribute around.
MAX_META_CONTENT_CHARS = 1024


@dataclasses.dataclass(frozen=True)
class Link:
    """One outlink: absolute normalised URL, its (shortened) anchor text, and whether not to follow it."""

    url: str
    text: str
    nofollow: bool
    written: str | None = None  # the URL in the page's own query order, when sorting changed it (decision 1807)


@dataclasses.dataclass(frozen=True)
class Robots:
    """Indexing directives that apply to us (Google's robots meta / X-Robots-Tag vocabulary)."""

    noindex: bool = False
    nofollow: bool = False
    noarchive: bool = False


@dataclasses.dataclass(frozen=True)
class Extraction:
    """Everything the parse step needs from one response. Empty for non-HTML bodies (headers still count)."""

    is_html: bool = False
    links: tuple[Link, ...] = ()
    canonical: str | None = None
    robots: Robots = Robots()
    refresh: str | None = None           # absolute target of a meta/HTTP refresh, if any
    refresh_delay: float | None = None   # seconds
    base_url: str = ""                   # what relative links were resolved against
    title: str | None = None
    text: str = ""
    lang: str | None = None              # ISO 639 primary language subtag
    charset: str | None = None           # the codec the body was decoded with
    links_invalid: int = 0               # hrefs normalize_url refused (mailto:, javascript:, malformed)
    links_over_cap: int = 0              # link elements left unread after max_links
    # (lower-cased name, content) of the `<meta name>` tags asked for (`extract(meta_names=)`), in
    # document order, at most `max_meta`: what the opt-out decision reads (udfs.optout.decide)
    meta: tuple[tuple[str, str], ...] = ()
    error: str | None = None             # the parser failed on this body; fields are partial
    # "depth" or "elements": the tree was built of the text before that cap (ExtractPolicy.max_depth,
    # max_elements); every field is then the prefix's
    limit: str | None = None


HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# WHATWG MIME Sniffing §7.1: tags that identify an unlabelled resource as HTML.
_HTML_SNIFF = re.compile(
    rb"\s*<(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p|!--)[\s>]",
    re.IGNORECASE,
)
# Text of these never belongs to the page's main content.
_BOILERPLATE = "script, style, noscript, template, svg, nav, header, footer, aside, form, select, button, iframe"
_NOFOLLOW_RELS = frozenset({"nofollow", "ugc", "sponsored"})
# X-Robots-Tag directives that carry their own "name: value" (not an agent prefix).
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_AGENT_PREFIX = re.compile(r"\s*([A-Za-z0-9_-]+)\s*:(.*)", re.DOTALL)
_LINK_VALUE = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,<]*)*)")
_REL_PARAM = re.compile(r"""\brel\s*=\s*(?:"([^"]*)"|([^\s;,"]+))""", re.IGNORECASE)
_REFRESH_DELAY = re.compile(r"[0-9]*(?:\.[0-9]*)?")
_REFRESH_URL = re.compile(r"url[ \t\n\r\f]*=[ \t\n\r\f]*", re.IGNORECASE)


def _header_pairs(headers: Headers) -> list[tuple[str, str]]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name).strip().lower(), str(value)) for name, value in items]


def _first(pairs: list[tuple[str, str]], name: str) -> str:
    return next((value for key, value in pairs if key == name), "")


def is_html(content_type: str, body: bytes) -> bool:
    """Whether to parse the body as HTML: a declared HTML type, or none declared and HTML-looking bytes (WHATWG MIME Sniffing §7.1)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media:
        return media in HTML_TYPES
    return _HTML_SNIFF.match(body.removeprefix(codecs.BOM_UTF8), 0, 512) is not None


def robots_directives(values: Iterable[str], agent: str, *, agent_prefixes: bool) -> Robots:
    """Combine robots directive lists (meta robots content or X-Robots-Tag values) that apply to `agent`.

    Google's robots meta tag and X-Robots-Tag spec: comma-separated, case-insensitive; "none" is
    noindex + nofollow. With `agent_prefixes` (X-Robots-Tag), "otherbot: noindex, nofollow" applies
    only to otherbot, up to the next agent prefix; valued directives like "unavailable_after: …" are
    not agent names.
    """
    agent = agent.lower()
    found: set[str] = set()
    for value in values:
        target = None  # None: every robot
        for part in value.split(","):
            directive = part.strip().lower()
            if agent_prefixes:
                match = _AGENT_PREFIX.fullmatch(directive)
                if match and match.group(1) not in _VALUED_DIRECTIVES:
                    target, directive = match.group(1), match.group(2).strip()
            if target is None or target == agent:
                found.add(directive)
    none = "none" in found
    return Robots(
        noindex=none or "noindex" in found,
        nofollow=none or "nofollow" in found,
        noarchive="noarchive" in found or "nocache" in found,
    )


def _link_header_canonical(values: Iterable[str]) -> str | None:
    """The target of the first `Link: <…>; rel="canonical"` (RFC 8288 §3; RFC 6596 §5)."""
    for value in values:
        for match in _LINK_VALUE.finditer(value):
            for rel in _REL_PARAM.finditer(match.group(2)):
                if "canonical" in (rel.group(1) or rel.group(2) or "").lower().split():
                    return match.group(1).strip()
    return None


def parse_refresh(content: str) -> tuple[float, str | None] | None:
    """A Refresh value "5; url=…" as (delay seconds, raw URL or None), or None if malformed (HTML §7.11.1).

    Follows the shared declarative refresh steps, except that a fractional delay is kept as a
    float (w3lib's reading) rather than truncated.
    """
    text = content.lstrip(" \t\n\r\f")
    match = _REFRESH_DELAY.match(text)
    number = match.group(0) if match else ""
    if not number or number == ".":
        return None
    delay = float(number if number[0] != "." else "0" + number)
    rest = text[len(number):]
    if not rest.strip(" \t\n\r\f"):
        return delay, None
    if rest[0] not in ";, \t\n\r\f":
        return None
    rest = rest.lstrip(" \t\n\r\f").lstrip(";,").lstrip(" \t\n\r\f")
    url_kw = _REFRESH_URL.match(rest)
    if url_kw:
        rest = rest[url_kw.end():]
    if rest[:1] in ("'", '"'):
        quote, rest = rest[0], rest[1:]
        rest = rest.split(quote, 1)[0]
    rest = rest.strip(" \t\n\r\f")
    return delay, (rest or None)


def _visible(tree: LexborHTMLParser, selector: str) -> list[LexborNode]:
    """The elements `selector` matches that are not inside <noscript> or <template>: content a browser with
    scripting would act on. One pass of lexbor's selector engine for each list, whatever the nesting."""
    hidden = {node.mem_id for node in tree.css(f"noscript {selector}, template {selector}")}
    return [node for node in tree.css(selector) if node.mem_id not in hidden]


def _head_links(tree: LexborHTMLParser) -> list[LexborNode]:
    """`<link rel href>` elements of the document's <head>, in document order."""
    head = tree.head
    return head.css("link[rel][href]") if head is not None else []


def _normalize(url: str, base: str | None, url_policy: UrlPolicy | None) -> str | None:
    if url_policy is None:
        return normalize_url(url, base)
    return normalize_url(url, base, policy=url_policy)


def _written(href: str, target: str, base: str, url_policy: UrlPolicy | None) -> str | None:
    return written_order(href, target, base, url_policy or DEFAULT_URL_POLICY)


def extract(
    url: str,
    headers: Headers,
    body: bytes,
    policy: ExtractPolicy = DEFAULT_POLICY,
    url_policy: UrlPolicy | None = None,
    meta_names: frozenset[str] = DEFAULT_META_NAMES,
) -> Extraction:
    """Links, canonical, robots directives, refresh, title, main text, language and charset of one response.

    Implements HTML §4.2.3 (`<base href>`), §7.11.1 (refresh), RFC 6596 (canonical), Google's robots
    meta / X-Robots-Tag directives, and the WHATWG encoding sniffing order (see `udfs.text`). Links
    are unique per page (first anchor text kept; nofollow only if every occurrence is nofollow),
    capped at `policy.max_links`. `meta_names` (lower case) picks the `<meta name content>` pairs
    kept in `Extraction.meta` for the opt-out decision. A non-HTML body
    gives an extraction with only the header-borne fields (X-Robots-Tag, Link canonical, Refresh).
    Never raises.
    """
    pairs = _header_pairs(headers)
    content_type = _first(pairs, "content-type")
    header_robots = robots_directives(
        (v for k, v in pairs if k == "x-robots-tag"), policy.user_agent_token, agent_prefixes=True
    )
    header_canonical = _link_header_canonical(v for k, v in pairs if k == "link")
    canonical = _normalize(header_canonical, url, url_policy) if header_canonical else None
    refresh_value = _first(pairs, "refresh")
    refresh_header = parse_refresh(refresh_value) if refresh_value else None
    head_only = Extraction(robots=header_robots, canonical=canonical, base_url=url)
    if refresh_header is not None:
        delay, target = refresh_header
        head_only = dataclasses.replace(
            head_only, refresh_delay=delay, refresh=_normalize(target, url, url_policy) if target else None
        )
    if not is_html(content_type, body):
        return head_only
    try:
        return _extract_html(url, pairs, content_type, body, policy, url_policy, head_only, meta_names)
    except Exception as exc:  # the parser met input it cannot handle: report it as data, keep the headers' verdicts
        return dataclasses.replace(head_only, is_html=True, error=f"{type(exc).__name__}: {exc}"[:200])


def _extract_html(
    url: str,
    pairs: list[tuple[str, str]],
    content_type: str,
    body: bytes,
    policy: ExtractPolicy,
    url_policy: UrlPolicy | None,
    head_only: Extraction,
    meta_names: frozenset[str],
) -> Extraction:
    html, charset = decode_html(body, content_type)
    cut = document_cut(html, policy.max_depth, policy.max_elements)
    # Parsed as a browser with scripting enabled (as Googlebot renders): <noscript> content is text, so
    # a tracking pixel in <noscript> cannot push <link rel=canonical> out of <head>, and a <base> or
    # refresh inside <noscript> is not obeyed.
    tree = LexborHTMLParser(html if cut is None else html[:cut.offset], scripting=True)
    agent = policy.user_agent_token.lower()

    base = url
    for node in _visible(tree, "base[href]")[:1]:  # HTML §4.2.3: only the first <base href> counts
        resolved = _normalize(node.attributes.get("href") or "", url, url_policy)
        if resolved:
            base = resolved

    robots_values: list[str] = []
    kept_meta: list[tuple[str, str]] = []
    refresh = (head_only.refresh_delay, head_only.refresh) if head_only.refresh_delay is not None else None
    visible_meta: set[int] | None = None   # computed at the first refresh candidate
    for meta in tree.css("meta"):
        attrs = meta.attributes
        name = (attrs.get("name") or "").strip().lower()
        if name in meta_names and len(kept_meta) < policy.max_meta:
            kept_meta.append((name, (attrs.get("content") or "")[:MAX_META_CONTENT_CHARS]))
        if name in ("robots", agent):
            robots_values.append(attrs.get("content") or "")
        elif refresh is None and (attrs.get("http-equiv") or "").strip().lower() == "refresh":
            if visible_meta is None:
                visible_meta = {node.mem_id for node in _visible(tree, "meta")}
            if meta.mem_id not in visible_meta:
                continue
            parsed = parse_refresh(attrs.get("content") or "")
            if parsed is not None:
                delay, target = parsed
                refresh = (delay, _normalize(target, base, url_policy) if target else None)
    meta_robots = robots_directives(robots_values, agent, agent_prefixes=False)
    robots = Robots(
        noindex=meta_robots.noindex or head_only.robots.noindex,
        nofollow=meta_robots.nofollow or head_only.robots.nofollow,
        noarchive=meta_robots.noarchive or head_only.robots.noarchive,
    )

    canonical = head_only.canonical
    if canonical is None:
        for node in _head_links(tree):
            if "canonical" in (node.attributes.get("rel") or "").lower().split():
                canonical = _normalize(node.attributes.get("href") or "", base, url_policy)
                break

    links, invalid, over_cap = _links(tree, base, robots.nofollow, policy, url_policy)

    title_node = tree.css_first("title")
    title = squash(title_node.text(deep=True), policy.max_title_chars) if title_node is not None else None

    root = tree.css_first("html")
    lang = primary_language((root.attributes.get("lang") or root.attributes.get("xml:lang")) if root else None)
    lang = lang or primary_language(_first(pairs, "content-language"))

    for node in tree.css(_BOILERPLATE):
        node.decompose()
    body_node = tree.body
    text = squash(body_node.text(deep=True, separator=" "), policy.max_text_chars) if body_node is not None else ""
    if lang is None and policy.detect_language:
        lang = detect_language(text)

    return Extraction(
        is_html=True,
        links=links,
        canonical=canonical,
        robots=robots,
        refresh=refresh[1] if refresh else None,
        refresh_delay=refresh[0] if refresh else None,
        base_url=base,
        title=title or None,
        text=text,
        lang=lang,
        charset=charset,
        links_invalid=invalid,
        links_over_cap=over_cap,
        meta=tuple(kept_meta),
        limit=None if cut is None else cut.reason,
    )


def _link_nodes(tree: LexborHTMLParser, policy: ExtractPolicy) -> list[tuple[LexborNode, str]]:
    """Link elements with the attribute that holds their target: anchors first, then frames."""
    nodes = [(node, "href") for node in tree.css("a[href], area[href]")]
    frames = ",".join(name for name, wanted in (("frame[src]", policy.follow_frames), ("iframe[src]", policy.follow_iframes)) if wanted)
    if frames:
        nodes.extend((node, "src") for node in tree.css(frames))
    return nodes


def _links(
    tree: LexborHTMLParser,
    base: str,
    page_nofollow: bool,
    policy: ExtractPolicy,
    url_policy: UrlPolicy | None,
) -> tuple[tuple[Link, ...], int, int]:
    """Unique outlinks in document order, plus counts of refused hrefs and of elements past the cap."""
    found: dict[str, Link] = {}
    resolved: dict[str, str | None] = {}  # raw href -> normalised: repeated hrefs are normalised once
    invalid = 0
    nodes = _link_nodes(tree, policy)
    for position, (node, attr) in enumerate(nodes):
        attrs = node.attributes  # lexbor builds this dict on every access
        href = (attrs.get(attr) or "").strip()
        if not href or href.startswith("#"):
            continue  # the page itself
        if href in resolved:
            target = resolved[href]
        else:
            target = resolved[href] = _normalize(href, base, url_policy)
        if target is None:
            invalid += 1
            continue
        rel = attrs.get("rel")
        nofollow = page_nofollow or (rel is not None and not _NOFOLLOW_RELS.isdisjoint(rel.lower().split()))
        known = found.get(target)
        if known is not None:
            if known.nofollow and not nofollow:
                found[target] = dataclasses.replace(known, nofollow=False)
            continue
        if len(found) >= policy.max_links:
            return tuple(found.values()), invalid, len(nodes) - position
        text = squash(node.text(deep=True), policy.max_anchor_chars) if attr == "href" else ""
        found[target] = Link(url=target, text=text, nofollow=nofollow, written=_written(href, target, base, url_policy))
    return tuple(found.values()), invalid, 0
