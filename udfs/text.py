"""Bytes to text for the parse step: charset detection, whitespace clean-up, language tags.

Pure helpers used by `udfs.links.extract`. Decoding follows the order of the WHATWG Encoding
sniffing algorithm (HTML §13.2.3.2): byte-order mark, transport charset, `<meta>` prescan; only
then a statistical detector, and UTF-8 with replacement as the last resort. Nothing here raises
on hostile bytes.
"""
from __future__ import annotations

import codecs
import re
from functools import lru_cache

# HTML §13.2.3.2: a BOM wins over every declaration.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# WHATWG Encoding §4.2 maps these labels to windows-1252; Python would decode them more strictly.
_WHATWG_ALIASES: dict[str, str] = {
    "ascii": "cp1252",
    "us-ascii": "cp1252",
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "l1": "cp1252",
    "iso-8859-9": "cp1254",
    "latin5": "cp1254",
    "tis-620": "cp874",
    "iso-8859-11": "cp874",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "x-gbk": "gb18030",
    "ks_c_5601-1987": "cp949",
    "euc-kr": "cp949",
    "shift_jis": "cp932",
    "x-sjis": "cp932",
    "sjis": "cp932",
    "windows-31j": "cp932",
    "big5": "big5hkscs",
}
_NOT_DOCUMENT_CODECS = frozenset({
    "unicode-escape", "raw-unicode-escape", "utf-7", "punycode", "idna", "undefined", "mbcs", "oem",
})
# HTML §13.2.3.2 step "meta prescan": a declared UTF-16 in the document itself means UTF-8.
_UTF16 = {"utf-16", "utf-16-le", "utf-16-be", "utf-16le", "utf-16be"}
# The prescan looks at the first 1024 bytes in browsers; real pages put long <head> preambles
# (inline CSS, comments) before the meta, so we look a little further.
PRESCAN_BYTES = 4096
_META_CHARSET = re.compile(
    rb"<meta\s[^>]*?charset\s*=\s*[\"']?\s*([a-zA-Z0-9_:.+-]{1,40})", re.IGNORECASE
)
_HEADER_CHARSET = re.compile(r"charset\s*=\s*[\"']?\s*([a-zA-Z0-9_:.+-]{1,40})", re.IGNORECASE)
# charset-normalizer is slow (tens of ms per 16 KB): it sees only a bounded sample.
DETECT_SAMPLE_BYTES = 8192


@lru_cache(maxsize=256)
def codec_name(label: str) -> str | None:
    """The Python codec for a charset label (WHATWG Encoding §4.2 aliases applied), or None if unknown."""
    key = label.strip().strip("\"'").lower()
    if not key:
        return None
    key = _WHATWG_ALIASES.get(key, key)
    try:
        info = codecs.lookup(key)
    except LookupError:
        return None
    # Only real character encodings: a page must not pick a codec that interprets its bytes as
    # escapes (unicode_escape), smuggles markup past the tokenizer (utf-7), or is not text at all.
    if info.name in _NOT_DOCUMENT_CODECS or not getattr(info, "_is_text_encoding", True):
        return None
    return info.name


def charset_from_content_type(content_type: str) -> str | None:
    """The `charset` parameter of a Content-Type value (RFC 9110 §8.3.1), as a known codec name."""
    match = _HEADER_CHARSET.search(content_type)
    return codec_name(match.group(1)) if match else None


def sniff_meta_charset(body: bytes) -> str | None:
    """HTML §13.2.3.2 prescan: `<meta charset>` or `<meta http-equiv content="...charset=">` near the start."""
    match = _META_CHARSET.search(body, 0, PRESCAN_BYTES)
    if not match:
        return None
    name = codec_name(match.group(1).decode("ascii", "replace"))
    if name is not None and name.replace("_", "-") in _UTF16:
        return "utf-8"
    return name


def _detect(body: bytes) -> str:
    """A statistical guess (charset-normalizer) for undeclared, non-UTF-8 bytes; cp1252 if it has none."""
    from charset_normalizer import from_bytes  # imported lazily: most pages never need it

    matches = from_bytes(body[:DETECT_SAMPLE_BYTES])
    best = matches.best()
    if best is None:
        return "cp1252"
    # Latin text decodes cleanly in several single-byte code pages; among equally clean readings,
    # windows-1252 is the browsers' fallback (HTML §13.2.3.3) and the most common one on the web.
    if any(m.chaos <= best.chaos and "cp1252" in m.could_be_from_charset for m in matches):
        return "cp1252"
    return codec_name(best.encoding) or "cp1252"


def decode_html(body: bytes, content_type: str = "") -> tuple[str, str]:
    """Decode an HTML body to text and name the charset used (HTML §13.2.3.2, WHATWG Encoding).

    Order: BOM, Content-Type charset, `<meta>` prescan, valid UTF-8, detector, UTF-8 with
    replacement. Undecodable bytes become U+FFFD. Never raises.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom):].decode(name, "replace"), name
    declared = charset_from_content_type(content_type) or sniff_meta_charset(body)
    if declared is not None:
        try:
            return body.decode(declared, "replace"), declared
        except (LookupError, ValueError):  # codecs that cannot decode (e.g. encoder-only) are skipped
            pass
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    guess = _detect(body)
    try:
        return body.decode(guess, "replace"), guess
    except (LookupError, ValueError):
        return body.decode("utf-8", "replace"), "utf-8"


def squash(text: str, limit: int | None = None) -> str:
    """Strip and collapse whitespace (all Unicode whitespace); cut to `limit` characters.

    With a limit, only a prefix of the text is collapsed: one long enough that its collapsed form runs
    past `limit`, so its first `limit` characters are the whole text's (a word the prefix cuts short
    ends past them). A 5 MB page body then costs what its first 200,000 characters do."""
    if limit is None:
        return " ".join(text.split())
    end = 2 * limit + 64
    while True:
        out = " ".join(text[:end].split())
        if len(out) > limit or end >= len(text):
            return out[:limit].rstrip()
        end *= 4


_LANG_TAG = re.compile(r"[A-Za-z]{2,3}(?=$|[-_])")


def primary_language(tag: str | None) -> str | None:
    """The primary subtag of a BCP 47 language tag (RFC 5646 §2.2.1), lower-cased: "en-US" → "en"."""
    if not tag:
        return None
    match = _LANG_TAG.match(tag.strip().split(",")[0].strip())
    return match.group(0).lower() if match else None


# py3langid's accuracy falls off on short inputs, and its cost grows with length: a bounded
# sample from the middle of the text (away from leftover menus) gives both speed and accuracy.
LANG_SAMPLE_CHARS = 500
LANG_MIN_CHARS = 40


def detect_language(text: str) -> str | None:
    """A cheap language guess (py3langid, ISO 639-1) for text with no declared language; None if too short."""
    if len(text) < LANG_MIN_CHARS:
        return None
    start = max(0, len(text) // 2 - LANG_SAMPLE_CHARS // 2)
    sample = text[start:start + LANG_SAMPLE_CHARS]
    import py3langid  # imported lazily: loading the model costs ~50 ms, once per worker

    lang, _score = py3langid.classify(sample)
    return str(lang) if lang else None
