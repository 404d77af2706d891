"""URL normalisation, fingerprints and the host slot key (spec: docs/architecture.md §2-§3, decisions 0100-0102).

Parsing follows the WHATWG URL Standard through `ada-url` (resolution against a base, IDNA to
punycode, IPv4/IPv6 host parsing, default ports, dot segments, percent-encoding of what must be
encoded). On the parsed URL we then apply the safe RFC 3986 §6.2.2 rules and the crawler's own
equivalences: unreserved escapes decoded, other escapes in upper case, stray `%`
and characters RFC 3986 does not allow escaped, fragment dropped, empty query and trailing host
dot removed, userinfo dropped, repeated slashes merged, tracking and session-id parameters stripped,
query pairs sorted by name. Anything not fetchable over http(s) normalises to None; nothing here raises on a
hostile input.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field

import mmh3
import tldextract
from ada_url.ada_adapter import ffi, lib

__all__ = [
    "DEFAULT_PORTS",
    "DEFAULT_URL_POLICY",
    "FP_SEED",
    "TRACKING_PARAMS",
    "TRACKING_PREFIXES",
    "UrlPolicy",
    "host_key",
    "normalize_url",
    "written_order",
    "registrable_domain",
    "url_fp",
]

# Query parameters that only say where a click came from (ad networks, mail tools, analytics).
# No public suite exists for these; the list is ours. Compared in lower case.
TRACKING_PARAMS: frozenset[str] = frozenset({
    "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "gad_source", "srsltid",   # Google Ads/Shopping
    "fbclid", "igshid", "twclid", "ttclid", "li_fat_id", "epik", "rdt_cid",    # social networks
    "msclkid", "yclid", "ysclid", "_openstat",                                 # Microsoft, Yandex
    "mc_cid", "mc_eid",                                                        # Mailchimp
    "_ga", "_gl",                                                              # Google Analytics linker
    "_hsenc", "_hsmi", "__hssc", "__hstc", "__hsfp", "hsctatracking",          # HubSpot
    "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id", "vero_conv", "wickedid",
    "rb_clickid", "s_cid", "trk_contact", "trk_msg", "trk_module", "trk_sid",
    "pk_campaign", "pk_kwd", "pk_keyword", "pk_source", "pk_medium", "pk_content", "pk_cid",  # Matomo
})
# Parameter-name prefixes of whole tracking families: Google/Urchin, Matomo, HubSpot ads. (Not
# "pk_": sites use it for primary keys.)
TRACKING_PREFIXES: tuple[str, ...] = ("utm_", "mtm_", "hsa_")

# Session ids in the shapes Heritrix strips (StripSessionIDs): exact value shapes keep false hits rare.
_SESSION_VALUE_32 = re.compile(r"[0-9A-Za-z]{32}")
_SESSION_NAMES_32: frozenset[str] = frozenset({"jsessionid", "phpsessid", "sid"})
_ASP_SESSION_NAME = re.compile(r"aspsessionid[a-z]{8}")
_ASP_SESSION_VALUE = re.compile(r"[A-Za-z]{24}")
# Java servlet URL rewriting puts the session in a path parameter: `/a;jsessionid=XYZ?q`.
_PATH_JSESSIONID = re.compile(r";jsessionid=[^/]*", re.IGNORECASE)

# A `%` escape (valid or not) or a character RFC 3986 §3.3-3.4 does not allow raw in path/query.
_PCT_OR_UNSAFE = re.compile(r"%(?:[0-9A-Fa-f]{2})?|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?]")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# WHATWG accepts hosts like "a..b" or "!$&'" that no resolver will look up.
_DNS_NAME = re.compile(r"[a-z0-9_\-]{1,63}(?:\.[a-z0-9_\-]{1,63})*")
# URLs that are their own normal form: see _is_clean for what the groups must still be checked for.
_CLEAN_HOST = r"(?:[a-z0-9_\-]{1,63}\.)*[a-z_\-][a-z0-9_\-]{0,62}"
_CLEAN_URL = re.compile(rf"(https?)://({_CLEAN_HOST})(?::([1-9][0-9]{{0,4}}))?(/[A-Za-z0-9\-._~!$&'()*+,=:@/]*)")
# The scheme and authority of a base URL that could be clean: what a path-absolute link (`/a/b`) keeps.
_CLEAN_ORIGIN = re.compile(rf"https?://{_CLEAN_HOST}(?::[1-9][0-9]{{0,4}})?(?=/)")
# The port each fetchable scheme implies: WHATWG drops it from a URL that names it.
DEFAULT_PORTS = {"http": 80, "https": 443}
_MULTI_SLASH = re.compile(r"//+")
_HAS_SCHEME = re.compile(r"[\x00-\x20]*[A-Za-z][A-Za-z0-9+.\-]*:")

_OMITTED = 0xFFFFFFFF          # ada's marker for an absent component offset
_HTTP, _HTTPS = 0, 2           # ada's SchemeType values
_DOMAIN_HOST = 0               # ada's HostType for a domain name (1 and 2 are IPv4 and IPv6)

# Part of the persisted state contract: changing it changes every stored fingerprint.
FP_SEED = 0x5EED_C0DE


@dataclass(frozen=True)
class UrlPolicy:
    """How URLs are normalised (config section `[urls]`); each default is the documented one.

    max_length: longest normalised URL kept, in characters (docs/architecture.md §7: 2,048).
    sort_query: sort query pairs by name, stable for repeated names (default on).
    strip_tracking: drop TRACKING_PARAMS / TRACKING_PREFIXES and `extra_strip_params`.
    strip_session_ids: drop jsessionid/phpsessid/sid/aspsessionid* in Heritrix's value shapes.
    merge_slashes: collapse `//` runs in the path into `/` (Nutch/crawler-commons behaviour).
    extra_strip_params: more parameter names to drop, lower case (a deployment's own trackers).
    keep_params: parameter names never dropped, lower case (overrides the tables above).
    default_scheme: scheme assumed for a base-less input with none ("example.com/a"); None rejects it.
        An input that starts like a scheme ("mailto:", but also "localhost:8080/") is never given one.
    """

    max_length: int = 2048
    sort_query: bool = True
    strip_tracking: bool = True
    strip_session_ids: bool = True
    merge_slashes: bool = True
    extra_strip_params: frozenset[str] = field(default_factory=frozenset)
    keep_params: frozenset[str] = field(default_factory=frozenset)
    default_scheme: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int):
            raise ValueError(f"max_length must be an integer, got {self.max_length!r}")
        if not 16 <= self.max_length <= 65536:
            raise ValueError(f"max_length must be within [16, 65536], got {self.max_length}")
        for name in ("sort_query", "strip_tracking", "strip_session_ids", "merge_slashes"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("extra_strip_params", "keep_params"):
            values = getattr(self, name)
            if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
                raise ValueError(f"{name} must be a set of non-empty parameter names, got {values!r}")
            if any(v != v.lower() for v in values):
                raise ValueError(f"{name} must be lower case (names are compared case-insensitively): {sorted(values)}")
            object.__setattr__(self, name, frozenset(values))
        if self.default_scheme not in (None, "http", "https"):
            raise ValueError(f"default_scheme must be 'http', 'https' or unset, got {self.default_scheme!r}")


DEFAULT_URL_POLICY = UrlPolicy()


def normalize_url(url: str, base: str | None = None, policy: UrlPolicy = DEFAULT_URL_POLICY) -> str | None:
    """The canonical absolute http(s) form of `url` resolved against `base`, or None.

    WHATWG parsing (ada-url), then RFC 3986 §6.2.2 syntax-based normalisation and the crawler's
    equivalences listed in the module docstring. None for other schemes, no or invalid host,
    invalid host escapes, unparsable input and results longer than `policy.max_length`.
    Never raises.
    """
    try:
        return _normalize(url, base, policy)
    except Exception:  # the contract: a URL we cannot process is a URL we do not fetch
        return None


def written_order(url: str, normalized: str, base: str | None = None,
                  policy: UrlPolicy = DEFAULT_URL_POLICY) -> str | None:
    """`url` normalised with its query pairs in the order the page wrote them, when sorting them made
    `normalized` (its normal form) another string; else None. robots.txt judges both forms: a rule
    such as `Disallow: /*?sort=` is written against the site's own order (decision 1807)."""
    if not policy.sort_query or "&" not in normalized.partition("?")[2]:
        return None
    written = normalize_url(url, base, _unsorted(policy))
    return written if written is not None and written != normalized else None


@functools.lru_cache(maxsize=16)
def _unsorted(policy: UrlPolicy) -> UrlPolicy:
    return dataclasses.replace(policy, sort_query=False)


def _normalize(url: str, base: str | None, policy: UrlPolicy) -> str | None:
    if _is_clean(url, policy):
        return url
    if base is not None and url[:1] == "/" and url[1:2] != "/" and (origin := _CLEAN_ORIGIN.match(base)):
        # A path-absolute link keeps the base's scheme and authority (WHATWG URL, "path start" state):
        # when the joined URL is clean, it is what the full path would return (decision 1827).
        joined = origin.group(0) + url
        if _is_clean(joined, policy):
            return joined
    return _normalize_full(url, base, policy)


def _is_clean(url: str, policy: UrlPolicy) -> bool:
    """True if `url` is already its own normal form, so parsing can be skipped.

    Absolute (a base changes nothing), lower-case scheme and LDH host whose last label cannot be a
    number (no IPv4 reading) and with no punycode to validate, no port but a non-default one written
    without leading zeros, no userinfo, escape, query, fragment, dot segment, empty
    segment or `;` parameter.
    """
    if len(url) > policy.max_length:
        return False
    m = _CLEAN_URL.fullmatch(url)
    if m is None:
        return False
    scheme, host, port, path = m.groups()
    if port is not None and (int(port) > 65535 or int(port) == DEFAULT_PORTS[scheme]):
        return False
    return len(host) <= 253 and "xn--" not in host and "/." not in path and "//" not in path


def _normalize_full(url: str, base: str | None, policy: UrlPolicy) -> str | None:
    if len(url) > 8 * policy.max_length:  # cheap guard: nothing this long shrinks below the cap
        return None
    parsed = _parse(url, base)
    if parsed is None and base is None and policy.default_scheme and not _HAS_SCHEME.match(url):
        parsed = _parse(policy.default_scheme + "://" + url.lstrip(), None)
    if parsed is None:
        return None
    href, scheme_end, host_start, host_end, path_start, search, hash_, host_type = parsed
    authority, port = href[:host_end], href[host_end:path_start]
    if href[host_start:host_start + 1] == "@":
        # Userinfo (`user:pw@`) is dropped: sent, it would be Basic auth; kept, archived and published.
        authority = href[:scheme_end] + "//" + href[host_start + 1:host_end]
        host_start = scheme_end + 2
    if authority.endswith("."):  # the DNS root label: "example.org." names "example.org"
        authority = authority[:-1]
    if host_type == _DOMAIN_HOST and not _valid_dns_name(authority[host_start:]):
        return None
    end = hash_ if hash_ != _OMITTED else len(href)
    if search != _OMITTED:
        path, query = href[path_start:search], href[search + 1:end]
    else:
        path, query = href[path_start:end], ""
    if policy.strip_session_ids and ";" in path:
        stripped = _PATH_JSESSIONID.sub("", path)
        if stripped != path:  # the cut can leave "." segments or "//": normalise the rest afresh
            return _normalize_full(authority + port + stripped + ("?" + query if query else ""), None, policy)
    if _PCT_OR_UNSAFE.search(path):
        path = _PCT_OR_UNSAFE.sub(_fix_escape, path)
    if policy.merge_slashes and "//" in path:
        path = _MULTI_SLASH.sub("/", path)
    if query:
        if _PCT_OR_UNSAFE.search(query):
            query = _PCT_OR_UNSAFE.sub(_fix_escape, query)
        query = _clean_query(query, policy)
    out = authority + port + path + ("?" + query if query else "")
    return out if len(out) <= policy.max_length else None


def _parse(url: str, base: str | None) -> tuple[str, int, int, int, int, int, int, int] | None:
    """WHATWG-parse `url` (against `base`); the href and component offsets if http(s), else None."""
    raw = _utf8(url)
    if base is None:
        obj = lib.ada_parse(raw, len(raw))
    else:
        raw_base = _utf8(base)
        obj = lib.ada_parse_with_base(raw, len(raw), raw_base, len(raw_base))
        if not lib.ada_is_valid(obj) and not lib.ada_can_parse(raw_base, len(raw_base)):
            # a broken base must not lose the absolute links of its page
            lib.ada_free(obj)
            obj = lib.ada_parse(raw, len(raw))
    try:
        if not lib.ada_is_valid(obj) or lib.ada_get_scheme_type(obj) not in (_HTTP, _HTTPS):
            return None
        data = lib.ada_get_href(obj)
        href = ffi.unpack(data.data, data.length).decode("ascii")
        c = lib.ada_get_components(obj)
        return (href, c.protocol_end, c.host_start, c.host_end, c.pathname_start, c.search_start, c.hash_start,
                lib.ada_get_host_type(obj))
    finally:
        lib.ada_free(obj)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: replaced by U+FFFD as a browser would
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def _valid_dns_name(host: str) -> bool:
    """A host DNS can resolve (RFC 1035 §2.3.4, plus `_`): LDH labels of 1-63 octets, 253 in all."""
    return len(host) <= 253 and _DNS_NAME.fullmatch(host) is not None


def _fix_escape(match: re.Match[str]) -> str:
    """RFC 3986 §6.2.2.1-2: decode unreserved escapes, upper-case others, escape `%` and unsafe chars."""
    text = match.group()
    if text[0] != "%":
        return "%%%02X" % ord(text)
    if len(text) == 1:  # a `%` that starts no escape stands for itself
        return "%25"
    char = chr(int(text[1:], 16))
    return char if char in _UNRESERVED else text.upper()


def _clean_query(query: str, policy: UrlPolicy) -> str:
    """Drop empty, nameless, tracking and session pairs; `name=` becomes `name`; sort by name if asked."""
    kept: list[str] = []
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if not name:
            continue
        lname = name.lower()
        if lname not in policy.keep_params and _dropped(lname, value, policy):
            continue
        kept.append(pair if value else name)
    if policy.sort_query and len(kept) > 1:
        kept.sort(key=_pair_name)
    return "&".join(kept)


def _pair_name(pair: str) -> str:
    return pair.partition("=")[0]


def _dropped(lname: str, value: str, policy: UrlPolicy) -> bool:
    if policy.strip_tracking and (
        lname in TRACKING_PARAMS or lname.startswith(TRACKING_PREFIXES) or lname in policy.extra_strip_params
    ):
        return True
    if policy.strip_session_ids:
        if lname in _SESSION_NAMES_32:
            return _SESSION_VALUE_32.fullmatch(value) is not None
        if lname.startswith("aspsessionid"):
            return _ASP_SESSION_NAME.fullmatch(lname) is not None and _ASP_SESSION_VALUE.fullmatch(value) is not None
    return False


def is_fp(value: object) -> bool:
    """Whether `value` can be a url_fp: an unsigned 64-bit int (not a bool); never raises."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64


def url_fp(normalized_url: str) -> int:
    """Stable unsigned 64-bit fingerprint of a normalised URL (docs/architecture.md §3 `url_fp`).

    MurmurHash3 x64-128 of the UTF-8 bytes with the fixed seed FP_SEED, first 64 bits.
    """
    try:
        data = normalized_url.encode("utf-8")
    except UnicodeEncodeError:
        data = normalized_url.encode("utf-8", "surrogatepass")
    return mmh3.hash64(data, FP_SEED, signed=False)[0]


def host_key(url: str) -> str:
    """THE slot key of a normalised URL: `host[:port]`, port only when non-default (docs/architecture.md §2.4).

    Used for key_by, the robots cache and politeness state. `url` must come from normalize_url
    (lower-case punycode host, default port dropped); raises ValueError for a non-http(s) URL.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ValueError(f"host_key needs a normalised http(s) URL, got {url[:100]!r}")
    end = len(rest)
    for delim in "/?#":
        i = rest.find(delim)
        if 0 <= i < end:
            end = i
    authority = rest[:end]
    return authority[authority.rfind("@") + 1:]


_extractor: tldextract.TLDExtract | None = None


def registrable_domain(host: str) -> str:
    """The registrable domain (eTLD+1, ICANN section of the Public Suffix List) of `host`.

    Uses tldextract's bundled suffix list, never the network. A port is ignored; IP addresses,
    single-label hosts and bare public suffixes are their own registrable domain. A top-level label
    the list does not know (`.test`, `.internal`) is a suffix by the list's default rule "*", so
    `a.b.test` belongs to `b.test` (decision 1811).
    """
    return _registrable(host.lower())


@functools.lru_cache(maxsize=65536)
def _registrable(host: str) -> str:
    global _extractor
    if host.startswith("["):
        return host[:host.find("]") + 1] or host
    name = host.rpartition(":")[0] if ":" in host else host
    if _extractor is None:
        _extractor = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    parts = _extractor(name)
    if not parts.suffix:
        labels = name.split(".")
        if len(labels) < 3 or parts.ipv4:   # an address, or one or two labels: the name is its own domain
            return name
        return ".".join(labels[-2:])
    if not parts.domain:
        return name
    return f"{parts.domain}.{parts.suffix}"
