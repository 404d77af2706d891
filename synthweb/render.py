"""What the synthetic web answers to one request: pages, robots, sitemaps, traps and failures.

`Router.respond` turns (Host header, server address, method, target) into a `Reply`; the HTTP
layer (`server.py`) only adds framing, conditional requests (304) and content encoding. The router
keeps the few counters hostile hosts need (every k-th request rate-limited or failing) and a bounded
cache of rendered pages.
"""
from __future__ import annotations

import gzip
import hashlib
import html
import math
import re
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from functools import lru_cache
from urllib.parse import parse_qs, urlsplit

import brotli

from synthweb.cache import ByteBoundedCache
from synthweb.clock import ChangeTracker, SimClock
from synthweb.corpus import LINK, SELF, Corpus, Template
from synthweb.links import SSRF_METADATA_URL, denied_bait_url, page_links, with_session
from synthweb.model import NESTING_BOMB_TAGS, Behaviour, Host, Page, RobotsVariant, Web, base_url
from synthweb import spa
from synthweb.robots import INDEX_CHILDREN, MOVED_PATH, robots_answer, rules_body, sitemap_path
from synthweb.tdmrep import TDMREP_PATH, tdmrep_body

HTML = "text/html; charset=utf-8"
_CALENDAR = re.compile(r"^/calendar/(\d{4})/(\d{2})/$")
_DEEP = re.compile(r"^/deep/((?:[a-z]/)+)$")
_CHAIN = re.compile(r"^/chain/(\d+)$")
_NESTED = re.compile(r"^/nested/([a-z]+)\.html$")
_PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
_STREAM_CHUNK = 64 * 1024


@dataclass
class Reply:
    """One response before HTTP framing."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    etag: str | None = None
    last_modified: int | None = None       # Unix seconds
    first_byte_delay: float = 0.0
    stream: Iterable[bytes] | None = None  # sent piece by piece, chunked unless stream_length is set
    stream_length: int | None = None
    chunk_interval: float = 0.0
    content_encoding: str | None = None    # the body is already encoded (the gzip and brotli bombs)
    gzip: Callable[[], bytes] | None = None  # makes the gzip form of `body` without compressing it
    retry_after: float | None = None       # seconds the client was asked to wait (for the log)
    precompressed: bool = False            # the body is a compressed file (a .gz sitemap): never content-encoded


def small_page(title: str, links: Iterable[str] = (), text: str = "") -> bytes:
    """A minimal HTML page (trap pages, errors, soft 404)."""
    items = "".join(f'<li><a href="{html.escape(u)}">{html.escape(u)}</a></li>' for u in links)
    return (f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p><ul>{items}</ul></body></html>").encode()


@lru_cache(maxsize=2)
def gzip_bomb(size: int) -> bytes:
    """A gzip member that inflates to `size` bytes of HTML whitespace (about 1000:1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1024 * 1024)
    out = [c.compress(b"<html><body>")]
    left = size
    while left > 0:
        out.append(c.compress(block[:min(left, len(block))]))
        left -= len(block)
    out.append(c.flush())
    return b"".join(out)


@lru_cache(maxsize=2)
def brotli_bomb(size: int) -> bytes:
    """A brotli stream that inflates to `size` bytes of HTML whitespace: a few hundred bytes for 200 MB (its
    4 MiB window is the usual one, what a decoder reserves for it; quality 5 makes it in about a second)."""
    c = brotli.Compressor(quality=5)
    block = b" " * (1024 * 1024)
    head = b"<html><body>"[:size]
    out = [c.process(head)]
    left = size - len(head)
    while left > 0:
        out.append(c.process(block[:min(left, len(block))]))
        left -= len(block)
    out.append(c.finish())
    return b"".join(out)


@lru_cache(maxsize=8)
def nesting_bomb(tag: str, depth: int) -> bytes:
    """A gzip member of an HTML page whose body nests `depth` `<tag>` elements (1,000,000 `<div>`: 5 MB of
    markup in about 10 KB), with a link home before them and a canonical link in every level's reach."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [c.compress(f'<!DOCTYPE html><html><head><title>Nested {tag}</title></head><body>'
                      f'<a href="/">home</a>'.encode())]
    block = f"<{tag}>".encode() * 10_000
    left = depth
    while left > 0:
        out.append(c.compress(block[:len(f"<{tag}>") * min(left, 10_000)]))
        left -= 10_000
    out.append(c.compress(b'<link rel="canonical" href="/"></body></html>'))
    out.append(c.flush())
    return b"".join(out)


@dataclass(frozen=True)
class Rendered:
    """A rewritten page: its bytes, and what is needed to make its gzip form cheaply."""

    template: Template
    values: list[bytes]
    body: bytes

    def size(self) -> int:
        return len(self.body) + 40 * len(self.values)

    def gzip(self) -> bytes:
        return self.template.fill_gzip(self.values, self.body)


def _extra(page: Page, version: int) -> bytes:
    """What changes inside an article: a revision note, and the ad and timestamp of near-duplicates."""
    extra = ""
    if version:
        extra += f'<p class="synthweb-revision">Updated: revision {version}</p>'
    if page.near_dup_of:
        n = int(hashlib.sha1(page.path.encode()).hexdigest()[:6], 16)
        extra += (f'<div class="ad">Sponsored: offer {n % 1000}</div>'
                  f'<p class="timestamp">Page generated {formatdate(1_600_000_000 + n, usegmt=True)}</p>')
    return extra.encode()


def _etag(*parts: object) -> str:
    return '"' + hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:16] + '"'


class Router:
    """Answers requests for one `Web` served on `port`."""

    def __init__(self, web: Web, corpus: Corpus, port: int, clock: SimClock | None = None,
                 cache_bytes: int = 128 * 1024 * 1024) -> None:
        self.web = web
        self.corpus = corpus
        self.port = port
        self.clock = clock or SimClock(web.policy.clock_speed, origin=web.policy.clock_origin)
        self.changes = ChangeTracker()
        self.pages: ByteBoundedCache[Rendered] = ByteBoundedCache(cache_bytes, Rendered.size)
        self._counters: dict[str, int] = {}

    def respond(self, host_header: str, server_ip: str, method: str, target: str) -> Reply:
        """The reply to one request (spec: task brief "Server", "Pages", "Hostile hosts")."""
        host = self.web.by_name.get(host_header)
        if host is None:
            return Reply(404, [("Content-Type", HTML)], small_page("Unknown host", text=host_header))
        if host.ip != server_ip:
            return Reply(421, [("Content-Type", HTML)], small_page("Misdirected request"))
        split = urlsplit(target)
        path, query = split.path or "/", split.query
        if path == "/robots.txt":
            a = robots_answer(self.web, host, self.corpus, self.port)
            reply = Reply(a.status, list(a.headers), a.body)
            if a.status == 429:
                reply.retry_after = float(self.web.policy.robots_retry_after)
            return reply
        if path == TDMREP_PATH:   # before the failure behaviours, like robots.txt: their counters stay as they were
            body = tdmrep_body(host)
            if body is None:
                return self._not_found(host, path)
            return Reply(200, [("Content-Type", "application/json")], body)
        if path == MOVED_PATH:
            return Reply(200, [("Content-Type", "text/plain; charset=utf-8")], rules_body(host, self.port))
        if path.startswith("/sitemap"):
            return self._sitemap(host, path)
        failure = self._failure(host)
        if failure is not None:
            return failure
        if host.spa and (reply := self._spa(host, path, query)) is not None:
            return reply
        page = host.page_map.get(path)
        if page is not None:
            return self._page(host, page, query)
        return self._special(host, path) or self._not_found(host, path)

    # -- pages -------------------------------------------------------------------------------

    def _page(self, host: Host, page: Page, query: str) -> Reply:
        key = f"{self.web.seed}|{host.name}|{page.body_key}"
        version, last = self.changes.version(key, page.change_rate, self.clock.now())
        variant = page.path if page.near_dup_of else ""
        etag = _etag(key, version, variant)
        modified = int(self.web.policy.sim_epoch + last)
        if page.content_type == "application/pdf":
            return Reply(200, [("Content-Type", page.content_type)], _PDF, etag=etag, last_modified=modified)
        if Behaviour.SESSION_TRAP in host.behaviours:
            sid = (parse_qs(query).get("sid") or [""])[0]
            r = self._render(host, page, version, sid)
            return Reply(200, [("Content-Type", HTML)], r.body, gzip=r.gzip)
        cache_key = (host.name, page.body_key, version, variant)
        r = self.pages.get_or_make(cache_key, lambda: self._render(host, page, version, None))
        headers = [("Content-Type", HTML), ("X-Robots-Tag", "noai")] if host.noai else [("Content-Type", HTML)]
        return Reply(200, headers, r.body, etag=etag, last_modified=modified, gzip=r.gzip)

    def _render(self, host: Host, page: Page, version: int, sid: str | None) -> Rendered:
        template = self.corpus.template(page.source)
        links = page_links(self.web, host, page, template.n_links, self.port)
        own = base_url(host.name, self.port)
        if sid is not None:
            links = [with_session(u, hashlib.sha1(f"{sid}|{i}".encode()).hexdigest()[:12])
                     if u.startswith("/") or u.startswith(own + "/") else u for i, u in enumerate(links)]
        it = iter(links)
        self_url = (own + page.body_key).encode()
        extra = _extra(page, version)
        # Generated URLs hold no quotes or angle brackets; only a query's "&" needs escaping.
        values = [next(it).replace("&", "&amp;").encode() if s == LINK else self_url if s == SELF else extra
                  for s in template.slots]
        return Rendered(template, values, template.fill(values))

    def _spa(self, host: Host, path: str, query: str) -> Reply | None:
        """A single-page-app host's shell, shared script and style, and JSON API (synthweb.spa); None
        for any other path."""
        if path == spa.SCRIPT_PATH:
            return Reply(200, [("Content-Type", "text/javascript"), ("Cache-Control", "max-age=86400")], spa.SCRIPT,
                         etag=_etag("spa", spa.SCRIPT_PATH, len(spa.SCRIPT)))
        if path == spa.STYLE_PATH:
            return Reply(200, [("Content-Type", "text/css"), ("Cache-Control", "max-age=86400")], spa.STYLE,
                         etag=_etag("spa", spa.STYLE_PATH, len(spa.STYLE)))
        if path in (spa.API_PAGE, spa.API_MORE):
            page = host.page_map.get(spa.api_path(query) or "")
            if page is None:
                return Reply(404, [("Content-Type", "application/json")], b'{"error": "no such page"}')
            links = page_links(self.web, host, page, spa.LINKS_PER_PAGE, self.port)
            body = spa.page_json(page.path, spa.title_of(host.name, page.path), links) if path == spa.API_PAGE \
                else spa.more_json(links)
            return Reply(200, [("Content-Type", "application/json")], body)
        page = host.page_map.get(path)
        if page is not None and page.content_type.startswith("text/html"):
            return Reply(200, [("Content-Type", HTML)], spa.SHELL, etag=_etag("spa", "shell", len(spa.SHELL)))
        return None

    def _not_found(self, host: Host, path: str) -> Reply:
        if Behaviour.SOFT_404 in host.behaviours:
            return Reply(200, [("Content-Type", HTML)],
                         small_page("Page not found", ["/"], f"Sorry, {path} does not exist."))
        return Reply(404, [("Content-Type", HTML)], small_page("404 Not Found", ["/"]))

    # -- sitemaps ----------------------------------------------------------------------------

    def _sitemap(self, host: Host, path: str) -> Reply:
        if path.startswith("/sitemaps/"):   # another host's sitemap, cross-submitted by its robots.txt
            owner = self.web.by_name.get(path[len("/sitemaps/"):].removesuffix(".xml"))
            if owner is None or owner.sitemap_host != host.name:
                return self._not_found(host, path)
            host, path = owner, sitemap_path(owner)
        own = base_url(host.name, self.port)
        pages = [p for p in host.pages if p.path not in ("/search",)]
        half = (len(pages) + 1) // 2
        if host.sitemap == "index" and path == "/sitemap_index.xml":
            items = "".join(f"<sitemap><loc>{own}{child}</loc></sitemap>" for child in INDEX_CHILDREN)
            return self._xml(f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{items}</sitemapindex>')
        chosen = dict(zip(INDEX_CHILDREN, (pages[:half], pages[half:]))).get(path) \
            if host.sitemap == "index" else (pages if path == sitemap_path(host) else None)
        if chosen is None:
            return self._not_found(host, path)
        now = self.clock.now()
        items = []
        for p in chosen:
            _, last = self.changes.version(f"{self.web.seed}|{host.name}|{p.body_key}", p.change_rate, now)
            day = time.strftime("%Y-%m-%d", time.gmtime(self.web.policy.sim_epoch + last))
            items.append(f"<url><loc>{html.escape(own + p.path)}</loc><lastmod>{day}</lastmod></url>")
        reply = self._xml(f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{"".join(items)}</urlset>')
        if path.endswith(".gz"):   # a gzip file, as servers send `sitemap.xml.gz`: no Content-Encoding
            reply = Reply(200, [("Content-Type", "application/gzip")], gzip.compress(reply.body, mtime=0),
                          precompressed=True)
        return reply

    @staticmethod
    def _xml(text: str) -> Reply:
        return Reply(200, [("Content-Type", "application/xml")],
                     ('<?xml version="1.0" encoding="UTF-8"?>\n' + text).encode())

    # -- hostile behaviour ---------------------------------------------------------------------

    def _count(self, host: Host, what: str) -> int:
        key = f"{what}|{host.name}"
        n = self._counters.get(key, 0) + 1
        self._counters[key] = n
        return n

    def _failure(self, host: Host) -> Reply | None:
        """Every k-th page request of a rate-limited or flaky host fails."""
        p = self.web.policy
        if Behaviour.RATE_LIMITED in host.behaviours:
            n = self._count(host, "rate")
            if n % p.rate_limit_every == 0:
                secs = p.retry_after_seconds
                if (n // p.rate_limit_every) % 2:
                    value, wait = str(secs), float(secs)
                else:  # the HTTP-date form, rounded up to the next whole second
                    at = math.ceil(time.time()) + secs
                    value, wait = formatdate(at, usegmt=True), at - time.time()
                return Reply(429, [("Content-Type", HTML), ("Retry-After", value)],
                             small_page("429 Too Many Requests"), retry_after=wait)
        if Behaviour.FLAKY_5XX in host.behaviours:
            n = self._count(host, "flaky")
            if n % p.flaky_every == 0:
                status = 503 if (n // p.flaky_every) % 2 else 500
                return Reply(status, [("Content-Type", HTML)], small_page(f"{status} Server Error"))
        return None

    def _special(self, host: Host, path: str) -> Reply | None:
        b, p = host.behaviours, self.web.policy
        if Behaviour.CALENDAR_TRAP in b and (m := _CALENDAR.match(path)):
            year, month = int(m.group(1)), int(m.group(2))
            if 1 <= month <= 12:
                prev = (year, month - 1) if month > 1 else (year - 1, 12)
                nxt = (year, month + 1) if month < 12 else (year + 1, 1)
                links = [f"/calendar/{y:04d}/{mo:02d}/" for y, mo in (prev, nxt)] + ["/"]
                return Reply(200, [("Content-Type", HTML)], small_page(f"Events {year}-{month:02d}", links))
        if Behaviour.DEEP_TRAP in b and (m := _DEEP.match(path)):
            links = [f"{path}{chr(97 + k)}/" for k in range(p.deep_trap_fanout)] + ["/"]
            return Reply(200, [("Content-Type", HTML)], small_page(f"Level {path.count('/') - 2}", links))
        if Behaviour.SLOW_DRIP in b and path == "/slow/drip.html":
            chunks = [b"<!DOCTYPE html><html><body><p>"] + [b"x" * p.drip_chunk_bytes] * p.drip_chunks \
                + [b"</p></body></html>"]
            return Reply(200, [("Content-Type", HTML)], stream=chunks, chunk_interval=p.drip_interval)
        if Behaviour.SLOW_FIRST_BYTE in b and path == "/slow/first-byte.html":
            return Reply(200, [("Content-Type", HTML)], small_page("Finally", ["/"]),
                         first_byte_delay=p.first_byte_delay)
        if Behaviour.HUGE_PAGE in b and path == "/huge.html":
            return Reply(200, [("Content-Type", HTML)], stream=_huge_chunks(p.huge_page_bytes),
                         stream_length=p.huge_page_bytes)
        if Behaviour.GZIP_BOMB in b and path == "/bomb.html":
            return Reply(200, [("Content-Type", HTML)], gzip_bomb(p.gzip_bomb_bytes), content_encoding="gzip")
        if Behaviour.BROTLI_BOMB in b and path == "/brotli-bomb.html":
            return Reply(200, [("Content-Type", HTML)], brotli_bomb(p.brotli_bomb_bytes), content_encoding="br")
        if Behaviour.NESTING_BOMB in b and (m := _NESTED.match(path)) and m.group(1) in NESTING_BOMB_TAGS:
            return Reply(200, [("Content-Type", HTML)], nesting_bomb(m.group(1), p.nesting_bomb_depth),
                         content_encoding="gzip")
        if Behaviour.REDIRECTS in b:
            if path in ("/loop/a", "/loop/b"):
                return _redirect(302, "/loop/b" if path == "/loop/a" else "/loop/a")
            if m := _CHAIN.match(path):
                n = int(m.group(1))
                return _redirect(301, f"/chain/{n - 1}" if n > 0 else "/")
        if Behaviour.SSRF_BAIT in b and path in ("/go/metadata", "/go/denied"):
            return _redirect(302, SSRF_METADATA_URL if path == "/go/metadata" else denied_bait_url(self.web))
        if host.robots is RobotsVariant.WILDCARD and path == "/search":
            return Reply(200, [("Content-Type", HTML)], small_page("Search results", ["/"]))
        return None


def _redirect(status: int, location: str) -> Reply:
    return Reply(status, [("Location", location), ("Content-Type", HTML)], small_page("Moved", [location]))


def _huge_chunks(size: int) -> Iterable[bytes]:
    """Exactly `size` bytes of HTML in 64 KiB pieces, made as they are sent."""
    head, tail = b"<!DOCTYPE html><html><body>", b"</body></html>"
    if size < len(head) + len(tail):
        yield b" " * size
        return
    yield head
    left = size - len(head) - len(tail)
    para = b"<p>" + b"lorem ipsum dolor sit amet " * 40 + b"</p>\n"
    block = para * (_STREAM_CHUNK // len(para) + 1)
    while left > 0:
        piece = block[:min(left, _STREAM_CHUNK)]
        left -= len(piece)
        yield piece
    yield tail
