"""Properties of udfs.urls over generated input: never raises, idempotent, stable fingerprints."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.urls import DEFAULT_URL_POLICY, UrlPolicy, _is_clean, _normalize_full, host_key, normalize_url, url_fp

# Pieces that exercise every rule: case, IDNA, IPs, ports, dots, escapes (valid, invalid, unreserved),
# characters RFC 3986 forbids, tracking and session parameters, fragments, whitespace and controls.
_HOSTS = st.sampled_from([
    "Example.COM", "bücher.de", "xn--bcher-kva.de", "127.0.0.1", "0x7f.1", "[::1]", "[0:0::1]",
    "ex.com.", "a..b", "ex%2Ecom", "ex%zz.com", "ＥＸ.com", "", ".", "a" * 70 + ".com", "münchen.ÄÖÜ.de",
])
_PORTS = st.sampled_from(["", ":", ":80", ":443", ":8080", ":0", ":99999", ":x"])
_PATH_ATOMS = st.sampled_from([
    "/", "//", "a", "B", ".", "..", "%2e", "%2E%2e", "%7e", "%7E", "%2f", "%41", "%zz", "%", "%4",
    "é", " ", "|", "[", "]", "^", "`", "{", "}", "\\", ";jsessionid=0A1B", ";", ":", "@", "~", "\t", "\x00",
    "\ud800", "?",
])
_QUERY_ATOMS = st.sampled_from([
    "&", "=", "a=1", "b=", "c", "utm_source=x", "GCLID=1", "sid=0123456789abcdef0123456789abcdef",
    "phpsessid=0123456789abcdefghijklemopqrstuv", "aspsessionidABCDEFGH=ABCDEFGHIJKLMNOPQRSTUVWX",
    "q=%20", "q=+", "%26", "%3d", "%7e", "%", "é", "'", '"', "<", "?", "/", "#frag", ";", "=x",
])
_SCHEMES = st.sampled_from(["http://", "https://", "HTTP://", "hTTps://", "ftp://", "http:", "http:/", "", " http://"])


@st.composite
def url_like(draw: st.DrawFn) -> str:
    path = "".join(draw(st.lists(_PATH_ATOMS, max_size=8)))
    query = "".join(draw(st.lists(_QUERY_ATOMS, max_size=8)))
    return (draw(_SCHEMES) + draw(_HOSTS) + draw(_PORTS) + path
            + (("?" + query) if draw(st.booleans()) else "") + draw(st.sampled_from(["", "#x", " ", "\n"])))


_RELATIVE = st.sampled_from(["", "?", "#", "/", "//", "..", "../x", "?b=1&a=2", "//other.org/p", "\\x", "a b"])
_POLICIES = st.sampled_from([
    UrlPolicy(), UrlPolicy(sort_query=False), UrlPolicy(merge_slashes=False),
    UrlPolicy(strip_tracking=False, strip_session_ids=False), UrlPolicy(max_length=64),
])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=100)))
def test_never_raises_on_arbitrary_text(url: str, base: str | None) -> None:
    result = normalize_url(url, base)
    assert result is None or result.startswith(("http://", "https://"))


@settings(max_examples=300, deadline=None)
@given(url_like(), _POLICIES)
def test_normalize_is_idempotent(url: str, policy: UrlPolicy) -> None:
    once = normalize_url(url, policy=policy)
    if once is not None:
        assert normalize_url(once, policy=policy) == once


@settings(max_examples=300, deadline=None)
@given(_RELATIVE, url_like())
def test_resolved_links_are_idempotent(relative: str, base: str) -> None:
    once = normalize_url(relative, base)
    if once is not None:
        assert normalize_url(once) == once


@settings(max_examples=300, deadline=None)
@given(url_like(), _POLICIES)
def test_normalised_url_is_ascii_unfragmented_bounded_and_has_a_slot_key(url: str, policy: UrlPolicy) -> None:
    out = normalize_url(url, policy=policy)
    if out is None:
        return
    assert out.isascii() and "#" not in out and len(out) <= policy.max_length
    assert not any(c in out for c in " \t\n\\|^`{}<>\"")
    key = host_key(out)
    default_port = ":80" if out.startswith("http:") else ":443"
    assert key and key == key.lower() and not key.endswith((default_port, "."))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_url_fp_is_stable_and_unsigned_64_bit(text: str) -> None:
    fp = url_fp(text)
    assert 0 <= fp < 2**64
    assert url_fp(text) == fp


# --- the fast path (already-normal URLs skip parsing) must change no result -------------------

_LABEL = st.text("abcxyz0189_-", min_size=1, max_size=8)
_CLEAN_PATH = st.text("aZ09-._~!$&'()*+,=:@/", max_size=30)


_CLEAN_PORTS = st.sampled_from(["", "", ":80", ":443", ":8080", ":36295", ":65535", ":65536", ":080", ":0", ":"])


@st.composite
def clean_looking_url(draw: st.DrawFn) -> str:
    host = ".".join(draw(st.lists(_LABEL, min_size=1, max_size=4)))
    return draw(st.sampled_from(["http://", "https://"])) + host + draw(_CLEAN_PORTS) + "/" + draw(_CLEAN_PATH)


@settings(max_examples=500, deadline=None)
@given(st.one_of(clean_looking_url(), url_like()))
def test_fast_path_agrees_with_full_parse(url: str) -> None:
    if _is_clean(url, DEFAULT_URL_POLICY):
        assert _normalize_full(url, None, DEFAULT_URL_POLICY) == url


@settings(max_examples=500, deadline=None)
@given(href=st.one_of(_CLEAN_PATH.map(lambda p: "/" + p), _RELATIVE, url_like()),
       base=st.one_of(clean_looking_url(), url_like()), policy=_POLICIES)
def test_a_path_absolute_link_resolves_as_the_full_parse_does(href: str, base: str, policy: UrlPolicy) -> None:
    assert normalize_url(href, base, policy) == _normalize_full(href, base, policy)
