"""Real pages and robots.txt bodies from the webdata folder (`synthweb.webdata`), turned into link templates.

A template is the page's bytes cut at every `<a href>` value (and the canonical/base links), so a
rewritten page is one `b"".join` of fixed parts and generated URLs: no HTML parse per request.
Links with a non-http scheme (mailto:, javascript:, tel:, #fragment) stay as the page had them.
"""
from __future__ import annotations

import gzip
import json
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from synthweb.cache import ByteBoundedCache
from synthweb.webdata import PAGE_DIRS, require_webdata

ROBOTS_TAR = Path("robots_txt_protego") / "robots_txt_files.tar.gz"
ROBOTS_MANIFEST = Path("robots_txt_protego") / "manifest.tsv"
# Real robots bodies above this size are left to the HUGE variant, which is generated.
MAX_REAL_ROBOTS_BYTES = 64 * 1024

_VALUE = rb"""\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))"""
_ANCHOR_HREF = re.compile(rb"<(?:a|area)\s[^>]*?\bhref" + _VALUE, re.IGNORECASE)
_SELF_TAG = re.compile(rb"<(?:base|link)\s[^>]*>", re.IGNORECASE)
_HREF = re.compile(rb"\bhref" + _VALUE, re.IGNORECASE)
_CANONICAL = re.compile(rb"""\brel\s*=\s*["']?canonical\b""", re.IGNORECASE)
_SCHEME = re.compile(rb"^\s*([a-zA-Z][a-zA-Z0-9+.\-]*):")

LINK = "link"   # a slot to fill with a synthetic URL
SELF = "self"   # a slot to fill with the page's own absolute URL (canonical, base)
EXTRA = "extra"  # before </body>: revision notes and near-duplicate ads, usually empty

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, mtime 0, unknown OS
_FINAL_EMPTY_BLOCK = b"\x01\x00\x00\xff\xff"                  # BFINAL stored block of length 0


def _stored_blocks(data: bytes) -> bytes:
    """`data` as raw-deflate stored blocks (no compression), each at most 65,535 bytes."""
    out = []
    for i in range(0, len(data), 0xFFFF):
        piece = data[i:i + 0xFFFF]
        n = len(piece)
        out.append(b"\x00" + n.to_bytes(2, "little") + (n ^ 0xFFFF).to_bytes(2, "little") + piece)
    return b"".join(out)


def _deflate_parts(parts: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """Each part deflated on its own (full flush: no back-references across parts), byte-aligned."""
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return tuple(c.compress(part) + c.flush(zlib.Z_FULL_FLUSH) for part in parts)


@dataclass(frozen=True)
class Template:
    """A page cut into fixed parts around its slots: parts[0] slot[0] parts[1] ... parts[-1].

    `zparts` are the parts compressed once; a gzip body for any slot values is then the compressed
    parts interleaved with the values as stored blocks, so no page is compressed per request.
    """

    parts: tuple[bytes, ...]
    slots: tuple[str, ...]
    zparts: tuple[bytes, ...] = ()

    @property
    def n_links(self) -> int:
        return sum(1 for s in self.slots if s == LINK)

    def fill(self, values: list[bytes]) -> bytes:
        """Join the parts with one value per slot."""
        out = [self.parts[0]]
        for value, part in zip(values, self.parts[1:]):
            out.append(value)
            out.append(part)
        return b"".join(out)

    def fill_gzip(self, values: list[bytes], plain: bytes) -> bytes:
        """The gzip member of `plain`, which must be `self.fill(values)` (RFC 1951 §3.2.4, RFC 1952)."""
        out = [_GZIP_HEADER, self.zparts[0]]
        for value, zpart in zip(values, self.zparts[1:]):
            if value:
                out.append(_stored_blocks(value))
            out.append(zpart)
        out.append(_FINAL_EMPTY_BLOCK)
        out.append(zlib.crc32(plain).to_bytes(4, "little"))
        out.append((len(plain) & 0xFFFFFFFF).to_bytes(4, "little"))
        return b"".join(out)


def _keeps_original(href: bytes) -> bool:
    """Fragment-only, empty and non-http-scheme links are left as the page had them."""
    value = href.strip()
    if not value or value.startswith(b"#"):
        return True
    m = _SCHEME.match(value)
    return m is not None and m.group(1).lower() not in (b"http", b"https")


def _value_span(m: re.Match[bytes]) -> tuple[int, int]:
    group = next(i for i in (1, 2, 3) if m.group(i) is not None)
    return m.span(group)


def make_template(html: bytes) -> Template:
    """Cut `html` at every rewritable href value (spec: task brief, "links rewritten")."""
    cuts: list[tuple[int, int, str]] = []
    for m in _ANCHOR_HREF.finditer(html):
        start, end = _value_span(m)
        if not _keeps_original(html[start:end]):
            cuts.append((start, end, LINK))
    for tag in _SELF_TAG.finditer(html):
        if tag.group(0)[1:5].lower() == b"link" and not _CANONICAL.search(tag.group(0)):
            continue
        href = _HREF.search(html, tag.start(), tag.end())
        if href is not None:
            cuts.append((*_value_span(href), SELF))
    body_end = html.lower().rfind(b"</body")
    body_end = len(html) if body_end < 0 else body_end
    cuts.append((body_end, body_end, EXTRA))
    cuts.sort()
    parts: list[bytes] = []
    slots: list[str] = []
    pos = 0
    for start, end, kind in cuts:
        if start < pos:  # overlapping matches in broken markup: keep the first
            continue
        parts.append(html[pos:start])
        slots.append(kind)
        pos = end
    parts.append(html[pos:])
    return Template(tuple(parts), tuple(slots), _deflate_parts(tuple(parts)))


@dataclass(frozen=True)
class SourcePage:
    """One real page: where its gzipped HTML is and the URL it was fetched from."""

    file: Path
    url: str
    size: int


class Corpus:
    """Real pages (lazily read and templated, with a bounded cache) and real robots.txt bodies."""

    def __init__(self, webdata: Path, cache_bytes: int = 256 * 1024 * 1024) -> None:
        self.webdata = webdata
        require_webdata(webdata)
        pages: list[SourcePage] = []
        for d in PAGE_DIRS:
            manifest = webdata / d / "manifest.jsonl"
            for line in manifest.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    r = json.loads(line)
                    pages.append(SourcePage(webdata / d / r["file"], r["url"], int(r["bytes"])))
        if not pages:
            raise ValueError(f"no real pages found under {webdata}")
        self.pages: tuple[SourcePage, ...] = tuple(pages)
        self.robots_names: tuple[str, ...] = tuple(self._robots_names())
        self._robots: dict[str, bytes] | None = None
        self._templates: ByteBoundedCache[Template] = ByteBoundedCache(
            cache_bytes, lambda t: sum(map(len, t.parts)))

    def _robots_names(self) -> list[str]:
        rows = (webdata_line.split("\t") for webdata_line in
                (self.webdata / ROBOTS_MANIFEST).read_text(encoding="utf-8").splitlines()[1:])
        return [r[0] for r in rows if len(r) > 4 and r[3] == "True" and int(r[1]) <= MAX_REAL_ROBOTS_BYTES]

    def template(self, index: int) -> Template:
        """The link template of real page `index` (read and cut on first use)."""
        return self._templates.get_or_make(
            index, lambda: make_template(gzip.decompress(self.pages[index].file.read_bytes())))

    def robots_body(self, index: int) -> bytes:
        """The byte-exact real robots.txt body number `index` (the tar is read once, on first use)."""
        if self._robots is None:
            wanted = set(self.robots_names)
            bodies: dict[str, bytes] = {}
            with tarfile.open(self.webdata / ROBOTS_TAR, "r:gz") as tar:
                for member in tar:
                    name = member.name.rsplit("/", 1)[-1]
                    if member.isfile() and name in wanted:
                        f = tar.extractfile(member)
                        if f is not None:
                            bodies[name] = f.read()
            self._robots = bodies
        return self._robots.get(self.robots_names[index], b"")
