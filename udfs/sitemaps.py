"""Sitemap, sitemap-index, text-sitemap and feed parsing (sitemaps.org protocol 0.9; decisions 0401-0402).

Bodies are read as a bounded stream: gzip (recognised by its magic bytes, whatever the headers say)
is inflated chunk by chunk and stops at `max_bytes` of output, so a gzip bomb costs at most the cap;
XML goes through lxml's pull parser with entities never resolved, no DTD loading and no network, so
XXE and entity-expansion ("billion laughs") bodies yield their literal text. At most `max_urls`
entries are kept; hitting either cap sets a flag. Problems are returned as warnings: nothing here
raises on a hostile body.
"""
from __future__ import annotations

import calendar
import email.utils
import functools
import json
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from lxml import etree

from udfs.urls import host_key, normalize_url

__all__ = [
    "CHANGEFREQS",
    "DEFAULT_SITEMAP_POLICY",
    "SitemapEntry",
    "SitemapPolicy",
    "SitemapResult",
    "parse_lastmod",
    "parse_sitemap",
    "sitemap_loc_allowed",
    "Followable",
    "followable",
]

CHANGEFREQS: frozenset[str] = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_CHUNK = 64 * 1024
_MAX_WARNINGS = 20
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_HTTP_URL = re.compile(r"https?://", re.IGNORECASE)
# W3C Datetime (the sitemaps.org lastmod format) and RFC 3339 (Atom): YYYY[-MM[-DD[Thh:mm[:ss[.s]]TZD]]].
_W3C_DATETIME = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?"
    r"\s*(Z|z|[+-]\d{2}:?\d{2})?)?)?)?")


@dataclass(frozen=True)
class SitemapPolicy:
    """Limits of sitemap parsing (config section `[sitemaps]`); each default is the documented one.

    max_urls: entries kept per file (sitemaps.org: 50,000); more sets `truncated`.
    max_bytes: uncompressed bytes read per file (sitemaps.org: 50 MB = 52,428,800); more sets `size_capped`.
    max_loc_length: longest loc kept, in characters (sitemaps.org: under 2,048); longer ones are skipped.
    max_alternates: `xhtml:link` alternates kept per entry (100).
    parse_feeds: read RSS 2.0, Atom and JSON Feed bodies as lists of URLs (on).
    parse_text: read other bodies as text sitemaps, one URL per line (on).
    follow: the job fetches the sitemaps a host's robots.txt lists and sitemap indexes name, and
        queues the pages they list (on).
    max_per_host: `Sitemap:` lines of one robots.txt followed (8; the first ones on the host itself).
    """

    max_urls: int = 50_000
    max_bytes: int = 52_428_800
    max_loc_length: int = 2048
    max_alternates: int = 100
    parse_feeds: bool = True
    parse_text: bool = True
    follow: bool = True
    max_per_host: int = 8

    def __post_init__(self) -> None:
        for name, low in (("max_urls", 1), ("max_bytes", 1024), ("max_loc_length", 16), ("max_alternates", 0),
                          ("max_per_host", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("parse_feeds", "parse_text", "follow"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")


DEFAULT_SITEMAP_POLICY = SitemapPolicy()


@dataclass(frozen=True)
class SitemapEntry:
    """One listed URL: for an index, a sitemap's URL; otherwise a page's.

    lastmod: Unix seconds (UTC when the value has no zone), None when absent or unparsable.
    changefreq: one of CHANGEFREQS (lower case), else None.
    priority: within [0, 1] (clamped), None when absent or not a finite number.
    alternates: `xhtml:link rel="alternate"` hrefs, in document order.
    """

    loc: str
    lastmod: int | None = None
    changefreq: str | None = None
    priority: float | None = None
    alternates: tuple[str, ...] = ()


@dataclass(frozen=True)
class SitemapResult:
    """What one sitemap body lists.

    kind: "urlset", "index", "text", "feed" or "unknown" (not a sitemap, or nothing readable).
    truncated: more than `max_urls` entries were listed; the first `max_urls` are kept.
    size_capped: the (uncompressed) body was longer than `max_bytes`; only its start was read.
    warnings: what was skipped or wrong, at most 20 messages plus a count of the rest.
    """

    kind: str
    entries: tuple[SitemapEntry, ...] = ()
    truncated: bool = False
    size_capped: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def locs(self) -> list[str]:
        """The entries' locs, in document order."""
        return [e.loc for e in self.entries]


def parse_sitemap(body: bytes, *, url: str | None = None, content_type: str | None = None,
                  policy: SitemapPolicy = DEFAULT_SITEMAP_POLICY) -> SitemapResult:
    """The entries of a sitemap, sitemap index, text sitemap or feed (sitemaps.org protocol).

    `url` (where the body came from) resolves relative links of feeds; `content_type`
    only breaks ties: bodies are recognised by their bytes. Never raises.
    """
    state = _State(policy, url)
    try:
        _parse(body, content_type, state)
    except Exception as exc:  # errors as data: keep what was read, say why it stopped
        state.warn(f"parse stopped: {type(exc).__name__}")
    return state.result()


def parse_lastmod(text: str) -> int | None:
    """A W3C Datetime / RFC 3339 / RFC 2822 date as Unix seconds (naive means UTC), else None."""
    return _parse_lastmod(text.strip())


@functools.lru_cache(maxsize=4096)  # a sitemap repeats a few dates thousands of times
def _parse_lastmod(text: str) -> int | None:
    if m := _W3C_DATETIME.fullmatch(text):
        year, month, day, hour, minute, second, zone = m.groups()
        try:
            fields = (int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0), int(second or 0))
            if not (1 <= fields[1] <= 12 and 1 <= fields[2] <= calendar.monthrange(fields[0], fields[1])[1]
                    and fields[3] <= 23 and fields[4] <= 59 and fields[5] <= 60):
                return None
            return calendar.timegm(fields + (0, 0, 0)) - _zone_offset(zone)
        except ValueError:  # year 0 and friends
            return None
    try:
        parsed = email.utils.parsedate_tz(text)
    except Exception:  # the stdlib parser chokes on some malformed inputs
        return None
    if parsed is None:
        return None
    try:
        return int(email.utils.mktime_tz(parsed))
    except (OverflowError, ValueError):
        return None


def _zone_offset(zone: str | None) -> int:
    if zone is None or zone in ("Z", "z"):
        return 0
    digits = zone[1:].replace(":", "")
    offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
    return -offset if zone[0] == "-" else offset


def sitemap_loc_allowed(sitemap_url: str, loc: str, *, robots_hosts: frozenset[str] = frozenset()) -> bool:
    """Whether a sitemap may list `loc` (sitemaps.org "Sitemap file location" and cross-submission).

    Allowed when `loc` has the sitemap's scheme and host and lies under the sitemap's directory, or
    when `loc`'s host (lower case, with a non-default port) is in `robots_hosts`, the hosts whose
    robots.txt listed this sitemap. Never raises.
    """
    try:
        site, target = urlsplit(sitemap_url), urlsplit(loc)
        if target.netloc.lower() in robots_hosts:
            return True
        if (site.scheme.lower(), site.netloc.lower()) != (target.scheme.lower(), target.netloc.lower()):
            return False
        directory = site.path[:site.path.rfind("/") + 1] or "/"
        return (target.path or "/").startswith(directory)
    except Exception:
        return False


# --- reading -------------------------------------------------------------------------------------

class _State:
    """The growing result while one body is read."""

    def __init__(self, policy: SitemapPolicy, url: str | None) -> None:
        self.policy = policy
        self.url = url
        self.kind = "unknown"
        self.entries: list[SitemapEntry] = []
        self.truncated = False
        self.size_capped = False
        self.warnings: list[str] = []
        self.dropped_warnings = 0

    def warn(self, message: str) -> None:
        if len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(message)
        else:
            self.dropped_warnings += 1

    def add(self, loc: str | None, lastmod: str | None = None, changefreq: str | None = None,
            priority: str | None = None, alternates: tuple[str, ...] = (), *, resolve: bool = False) -> None:
        """Append one entry after checking its loc; past `max_urls` only sets `truncated`."""
        loc = (loc or "").strip()
        if not loc:
            self.warn("entry without loc skipped")
            return
        if resolve and self.url and not _SCHEME.match(loc):
            loc = urljoin(self.url, loc)
        if not _HTTP_URL.match(loc):
            self.warn(f"loc is not an absolute http(s) URL, skipped: {loc[:100]!r}")
            return
        if len(loc) > self.policy.max_loc_length:
            self.warn(f"loc longer than {self.policy.max_loc_length} characters skipped")
            return
        if len(self.entries) >= self.policy.max_urls:
            self.truncated = True
            return
        self.entries.append(SitemapEntry(
            loc, _lastmod(lastmod, self), _changefreq(changefreq, self), _priority(priority, self),
            alternates[:self.policy.max_alternates]))

    def result(self) -> SitemapResult:
        warnings = list(self.warnings)
        if self.dropped_warnings:
            warnings.append(f"{self.dropped_warnings} more warnings")
        if self.truncated:
            warnings.append(f"more than {self.policy.max_urls} URLs: the rest were not read")
        if self.size_capped:
            warnings.append(f"body larger than {self.policy.max_bytes} bytes uncompressed: the rest was not read")
        return SitemapResult(self.kind, tuple(self.entries), self.truncated, self.size_capped, tuple(warnings))


def _lastmod(text: str | None, state: _State) -> int | None:
    if text is None or not text.strip():
        return None
    value = parse_lastmod(text)
    if value is None:
        state.warn(f"unparsable lastmod: {text.strip()[:40]!r}")
    return value


def _changefreq(text: str | None, state: _State) -> str | None:
    if text is None or not text.strip():
        return None
    value = text.strip().lower()
    if value not in CHANGEFREQS:
        state.warn(f"unknown changefreq: {value[:40]!r}")
        return None
    return value


def _priority(text: str | None, state: _State) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        state.warn(f"unparsable priority: {text.strip()[:40]!r}")
        return None
    return min(1.0, max(0.0, value))


def _chunks(body: bytes, state: _State) -> Iterator[bytes]:
    """The uncompressed body in chunks, at most `max_bytes` in all; gzip members inflated as they come."""
    budget = state.policy.max_bytes
    if not body.startswith(_GZIP_MAGIC):
        if len(body) > budget:
            state.size_capped = True
        for start in range(0, min(len(body), budget), _CHUNK):
            yield body[start:min(start + _CHUNK, budget)]
        return
    data = body
    while data:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            while data and not inflater.eof:
                out = inflater.decompress(data, min(_CHUNK, budget + 1))
                data = inflater.unconsumed_tail
                if len(out) > budget:
                    yield out[:budget]
                    state.size_capped = True
                    return
                budget -= len(out)
                if out:
                    yield out
                elif not data:
                    break
        except zlib.error:
            state.warn("corrupt gzip data: read up to the error")
            return
        if not inflater.eof:
            state.warn("gzip data ends early: read what was there")
            return
        data = inflater.unused_data
        if data and not data.startswith(_GZIP_MAGIC):
            return  # trailing garbage after the last member, as gzip(1) ignores it


def _parse(body: bytes, content_type: str | None, state: _State) -> None:
    chunks = _chunks(body, state)
    # A byte-order mark or blank lines before `<?xml` (seen in the wild, Scrapy's test_sitemap_blanklines).
    # Leading blanks are dropped chunk by chunk: a body of whitespace costs one pass, not a quadratic one.
    for i, chunk in enumerate(chunks):
        if i == 0 and chunk.startswith(_UTF8_BOM):
            chunk = chunk[len(_UTF8_BOM):]
        stripped = chunk.lstrip(b" \t\r\n")
        if stripped:
            break
    else:
        state.warn("empty body")
        return
    first = stripped[:1]
    if first == b"<":
        _parse_xml(stripped, chunks, state)
    elif first in (b"{", b"[") and state.policy.parse_feeds:
        _parse_json_feed(stripped + b"".join(chunks), state)
    elif state.policy.parse_text and not (content_type or "").lower().startswith(("text/html", "application/xhtml")):
        _parse_text(stripped, chunks, state)
    else:
        state.warn(f"not a sitemap (content type {content_type!r})")


def _parse_text(head: bytes, chunks: Iterator[bytes], state: _State) -> None:
    # A line longer than any loc we keep is skipped as it streams, so one 50 MB line stays linear.
    limit = 4 * state.policy.max_loc_length  # UTF-8 takes at most 4 bytes a character
    pending, skipping = b"", False
    for chunk in _prepend(head, chunks):
        if skipping:
            cut = chunk.find(b"\n")
            if cut < 0:
                continue
            chunk, skipping = chunk[cut + 1:], False
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            _text_line(line, state)
            if state.truncated:
                break
        if state.truncated:
            break
        if len(pending) > limit:
            state.warn(f"line longer than {limit} bytes skipped")
            pending, skipping = b"", True
    else:
        if not skipping:
            _text_line(pending, state)
    # Random bytes are not a text sitemap with every line skipped: they are not a sitemap.
    state.kind = "text" if state.entries else "unknown"


def _text_line(line: bytes, state: _State) -> None:
    text = line.decode("utf-8", "replace").strip()
    if text:
        state.add(text)


def _parse_json_feed(data: bytes, state: _State) -> None:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        state.warn("body starts like JSON but does not parse")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        state.warn("JSON body is not a JSON Feed (no items list)")
        return
    state.kind = "feed"
    for item in doc["items"]:
        if not isinstance(item, dict):
            continue
        loc = item.get("url") or item.get("external_url")
        date = item.get("date_modified") or item.get("date_published")
        state.add(loc if isinstance(loc, str) else None, date if isinstance(date, str) else None, resolve=True)
        if state.truncated:
            return


def _local(tag: object) -> str:
    """An element's name without its namespace; "" for comments and processing instructions."""
    if not isinstance(tag, str):
        return ""
    return tag[tag.rfind("}") + 1:]


_ROOT_KINDS = {"urlset": "urlset", "sitemapindex": "index", "rss": "feed", "feed": "feed", "rdf": "feed"}
_ENTRY_TAGS = {"urlset": ("url",), "index": ("sitemap",), "feed": ("item", "entry")}
# Only these elements reach Python (any namespace or none: Scrapy's wrong-namespace cases); the
# entries' children are read from the finished entry, which keeps the per-URL cost low.
_EVENT_TAGS = tuple(f"{{*}}{name}" for name in ("urlset", "sitemapindex", "rss", "feed", "RDF",
                                                 "url", "sitemap", "item", "entry"))
# Feed entry dates, best first: Atom `updated`, RSS `pubDate`, Dublin Core `modified`/`date`, Atom `published`.
_FEED_DATES = ("updated", "pubDate", "modified", "date", "published")


def _parse_xml(head: bytes, chunks: Iterator[bytes], state: _State) -> None:
    parser = etree.XMLPullParser(
        events=("start", "end"), tag=_EVENT_TAGS, resolve_entities=False, load_dtd=False, no_network=True,
        huge_tree=False, recover=True, remove_comments=True, remove_pis=True)
    reader = _XmlReader(state)
    try:
        for chunk in _prepend(head, chunks):
            parser.feed(chunk)
            if not reader.read(parser):
                return
        parser.close()
    except etree.LxmlError as exc:
        state.warn(f"XML error: {str(exc)[:100]}")
    reader.read(parser)  # recovery at close() may still finish open elements
    if reader.root is None:
        state.warn("no sitemap root element")
    elif not reader.closed and not state.size_capped:
        # libxml2 stops without an exception on fatal errors such as entity amplification.
        state.warn("XML ends before its root element closes: read up to there")


class _XmlReader:
    """Turns the pull parser's events into entries."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.root: etree._Element | None = None
        self.closed = False

    def read(self, parser: etree.XMLPullParser) -> bool:
        """Consume the pending events; False once reading should stop (not a sitemap, or URL cap)."""
        state = self.state
        for event, element in parser.read_events():
            if self.root is None:
                self.root = element.getroottree().getroot()
                if not _start_root(self.root, state):
                    return False
            if event != "end":
                continue
            if element is self.root:
                self.closed = True
            elif _local(element.tag) in _ENTRY_TAGS.get(state.kind, ()):
                _read_entry(element, state)
                if state.truncated:
                    return False
        return True


def _prepend(head: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield head
    yield from chunks


def _start_root(root: etree._Element, state: _State) -> bool:
    name = _local(root.tag).lower()
    kind = _ROOT_KINDS.get(name)
    if kind is None or (kind == "feed" and not state.policy.parse_feeds):
        state.warn(f"root element <{_local(root.tag)[:40]}> is not a sitemap")
        return False
    state.kind = kind
    return True


def _read_entry(element: etree._Element, state: _State) -> None:
    """Read a finished entry element, then free it."""
    if state.kind == "feed":
        _feed_entry(element, state)
    else:
        _sitemap_entry(element, state)
    _free(element)


def _free(element: etree._Element) -> None:
    # Keeps memory flat on a 50 MB file: the entry and the siblings before it are done with.
    element.clear(keep_tail=False)
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]


def _text(element: etree._Element) -> str:
    """The element's own text; an unresolved entity reference (`&xxe;`) is left out, never expanded."""
    if not len(element):
        return element.text or ""
    return (element.text or "") + "".join(child.tail or "" for child in element)


def _sitemap_entry(element: etree._Element, state: _State) -> None:
    fields: dict[str, str] = {}
    alternates: list[str] = []
    for child in element:
        name = _local(child.tag)
        if name == "link":
            href = child.get("href")
            if href and (child.get("rel") or "alternate").lower() == "alternate":
                alternates.append(href.strip())
        elif name in ("loc", "lastmod", "changefreq", "priority") and name not in fields:
            fields[name] = _text(child)
    state.add(fields.get("loc"), fields.get("lastmod"), fields.get("changefreq"), fields.get("priority"),
              tuple(alternates))


def _feed_entry(element: etree._Element, state: _State) -> None:
    links: list[str] = []      # RSS <link>URL</link>, Atom rel="alternate" (the default rel)
    other_links: list[str] = []  # Atom rel="self" and others: the entry's URL only when nothing better
    dates: dict[str, str] = {}
    for child in element:
        child_name = _local(child.tag)
        if child_name == "link":
            href = child.get("href")
            if href is None:
                links.append(_text(child))
            elif (child.get("rel") or "alternate").lower() == "alternate":
                links.append(href)
            else:
                other_links.append(href)
        elif child_name in _FEED_DATES:
            dates.setdefault(child_name, _text(child))
    date = next((dates[n] for n in _FEED_DATES if n in dates), None)
    state.add(next(iter(links + other_links), None), date, resolve=True)


@dataclass(frozen=True)
class Followable:
    """What the crawler follows from one fetched sitemap (decisions 1812, 1816).

    pages: (normalised URL, lastmod, priority, changefreq) of each listed page the sitemap speaks for
        (its own host, and the host whose robots.txt submitted it), in document order, without repeats.
    sitemaps: the normalised URLs of the sitemaps an index lists on those hosts.
    elsewhere: listed pages on any other host or scheme: followed like links, without the hints.
    skipped: listed URLs not followed (unparsable, repeated, or an index's sitemap on another host).
    """

    pages: tuple[tuple[str, int | None, float | None, str | None], ...] = ()
    sitemaps: tuple[str, ...] = ()
    elsewhere: tuple[str, ...] = ()
    skipped: int = 0


def followable(sitemap_url: str, result: SitemapResult, sitemap_for: str | None = None) -> Followable:
    """The URLs of `result` (the sitemap fetched from `sitemap_url`) that the crawler follows.

    The job fetches sitemaps a robots.txt lists, or that an index on the same host names, so each
    counts as cross-submitted by its host: a page on the sitemap's own scheme and host,
    in any directory, is followed with what the sitemap says about it. `sitemap_for` is the host key
    (udfs.urls.host_key) of another host whose robots.txt listed this sitemap (sitemaps.org
    cross-submission): the sitemap speaks for that host too, so its pages (either scheme) are followed
    with their hints as well, and an index's sitemaps on it are followed. A page on any
    other host is followed like a link on a page, without the sitemap's hints; an index's sitemap there
    is not followed. Never raises.
    """
    try:
        own = host_key(sitemap_url)
    except ValueError:
        return Followable(skipped=len(result.entries))
    scheme = sitemap_url.partition("://")[0]
    submitter = sitemap_for if isinstance(sitemap_for, str) and sitemap_for and sitemap_for != own else None
    seen: set[str] = set()
    pages: list[tuple[str, int | None, float | None, str | None]] = []
    sitemaps: list[str] = []
    elsewhere: list[str] = []
    skipped = 0
    for entry in result.entries:
        url = normalize_url(entry.loc)
        try:
            key = host_key(url) if url is not None else None
            ours = key is not None and ((key == own and url.partition("://")[0] == scheme) or key == submitter)
        except ValueError:
            url = None
        if url is None or url in seen or (result.kind == "index" and not ours):
            skipped += 1
            continue
        seen.add(url)
        if not ours:
            elsewhere.append(url)
        elif result.kind == "index":
            sitemaps.append(url)
        else:
            pages.append((url, entry.lastmod, entry.priority, entry.changefreq))
    return Followable(tuple(pages), tuple(sitemaps), tuple(elsewhere), skipped)
