"""udfs.urls against the public URL suites in testdata (crawler-commons, Heritrix, WPT, w3lib).

WPT decides what a URL *is* (parsing); crawler-commons, Heritrix and w3lib decide which URLs are
*the same* (normalisation). Every deliberate difference is in an allow-list with its reason.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.paths import TESTDATA
from udfs.urls import host_key, normalize_url

CC = TESTDATA / "crawler_commons"


def _csv_rows(path: Path) -> list[list[str]]:
    """crawler-commons CSV: `#` comments, blank lines, JUnit's trimming of unquoted fields."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return [[field.strip() for field in row] for row in csv.reader(lines, skipinitialspace=True)]


def _is_fetchable(expected: str) -> bool:
    """Our contract maps URLs with another scheme or without a host to None."""
    parts = urlsplit(expected)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


# --- crawler-commons BasicURLNormalizer --------------------------------------------------------

CC_NORMALIZER_ALLOWED = {
    "foo.com/index.html": "no scheme: guessing http is opt-in (UrlPolicy.default_scheme, tested in test_urls.py)",
}
_CC_PAIRS = _csv_rows(CC / "normalizer" / "weirdToNormalizedUrls.csv")


@pytest.mark.parametrize(("weird", "expected"), [tuple(r) for r in _CC_PAIRS], ids=[r[0] for r in _CC_PAIRS])
def test_crawler_commons_normalizes_weird_url_like_basic_url_normalizer(weird: str, expected: str) -> None:
    ours = normalize_url(weird)
    if weird in CC_NORMALIZER_ALLOWED:
        assert ours != expected, f"allow-listed case now agrees, drop it: {weird!r}"
        return
    if not _is_fetchable(expected):
        assert ours is None
        return
    assert ours == expected


@pytest.mark.parametrize("invalid", [r[0] for r in _csv_rows(CC / "normalizer" / "invalidUrls.csv")])
def test_crawler_commons_invalid_url_normalizes_to_none(invalid: str) -> None:
    assert normalize_url(invalid) is None


CC_RESOLVE_ALLOWED = {
    "/a%2fc": "escapes in upper case (RFC 3986 §6.2.2.1); crawler-commons resolves without normalising",
    "/a/%2f/c": "escapes in upper case (RFC 3986 §6.2.2.1); crawler-commons resolves without normalising",
}
_CC_RESOLVE = _csv_rows(CC / "url-utils" / "url-resolve.csv")


@pytest.mark.parametrize(("relative", "base", "expected"), [tuple(r) for r in _CC_RESOLVE],
                         ids=[f"{r[0]}|{r[1]}" for r in _CC_RESOLVE])
def test_crawler_commons_resolves_relative_url_against_base(relative: str, base: str, expected: str) -> None:
    ours = normalize_url(relative, base or None)
    if relative in CC_RESOLVE_ALLOWED:
        assert ours != expected, f"allow-listed case now agrees, drop it: {relative!r}"
        assert ours == normalize_url(expected), "the resolution itself must still agree"
        return
    if not _is_fetchable(expected):
        assert ours is None
        return
    # The suite checks resolution only; our output is also normalised (fragment dropped, ...).
    assert ours == normalize_url(expected)


# --- Heritrix StripSessionIDs ------------------------------------------------------------------

_HERITRIX = json.loads((TESTDATA / "heritrix_canonicalize" / "strip_session_ids.json").read_text())["cases"]


@pytest.mark.parametrize("case", _HERITRIX, ids=[c["note"] for c in _HERITRIX])
def test_heritrix_session_ids_are_stripped(case: dict) -> None:
    assert normalize_url(case["input"]) == case["compare_after_trailing_cleanup"]


# --- WPT urltestdata: the http/https cases -----------------------------------------------------

def _wpt_http_cases() -> list[dict]:
    cases = []
    for case in json.loads((TESTDATA / "wpt_url" / "urltestdata.json").read_text(encoding="utf-8")):
        if isinstance(case, str):
            continue
        if case.get("failure"):
            scheme_of = case["input"].strip().split(":", 1)[0].lower()
            base = case.get("base") or ""
            if scheme_of in ("http", "https") or (":" not in case["input"] and base.startswith(("http:", "https:"))):
                cases.append(case)
        elif case["protocol"] in ("http:", "https:"):
            cases.append(case)
    return cases


WPT_ALLOWED = {
    # WPT accepts these hosts; a host of only root labels names no DNS host: not fetchable.
    ("http://./", None): "host '.' is the DNS root alone: no host to fetch from",
    ("http://../", None): "host '..' is empty labels only: no host to fetch from",
    ("http://foo.09..", None): "an empty label before the root dot: not a DNS name",
    ('http://!"$&\'()*+,-.;=_`{}~/', None): "host of characters DNS names cannot hold: not fetchable",
}
_WPT = _wpt_http_cases()


def _wpt_id(case: dict) -> str:
    return f"{case['input']!r}|{case.get('base')!r}"


@pytest.mark.parametrize("case", _WPT, ids=[_wpt_id(c) for c in _WPT])
def test_wpt_http_parse_case_agrees(case: dict) -> None:
    ours = normalize_url(case["input"], case.get("base"))
    reason = WPT_ALLOWED.get((case["input"], case.get("base")))
    if reason:
        expected = None if case.get("failure") else case["href"]
        assert ours != expected and (ours is None or normalize_url(expected) != ours), reason
        return
    if case.get("failure"):
        assert ours is None
        return
    assert ours is not None
    assert host_key(ours) == case["host"].removesuffix(".").replace(".:", ":")
    # Same URL once the WPT href gets our normalisation (escapes, fragment, query, slashes).
    assert ours == normalize_url(case["href"])


# --- WPT toascii: host parsing and IDNA ---------------------------------------------------------

_TOASCII = [c for c in json.loads((TESTDATA / "wpt_url" / "toascii.json").read_text(encoding="utf-8"))
            if not isinstance(c, str)]
_DNS_NAME = re.compile(r"[a-z0-9_\-]{1,63}(?:\.[a-z0-9_\-]{1,63})*")
# One allow-listed rule instead of ten near-identical lines: WPT accepts hosts that DNS cannot hold
# (a label over 63 octets, a name over 253, an empty label, a `=`); we return None for them, since
# no fetch could succeed. The count is pinned so the rule cannot quietly cover more cases.
TOASCII_NOT_DNS_NAMES = 10


def _dns_holds(host: str) -> bool:
    return len(host) <= 253 and _DNS_NAME.fullmatch(host) is not None


@pytest.mark.parametrize("case", _TOASCII, ids=[c["input"] for c in _TOASCII])
def test_wpt_toascii_host_agrees(case: dict) -> None:
    ours = normalize_url(f"http://{case['input']}/x")
    expected = case["output"]
    if expected is None or not _dns_holds(expected):
        assert ours is None
    else:
        assert ours is not None and host_key(ours) == expected


def test_wpt_toascii_dns_rule_covers_only_the_known_cases() -> None:
    assert sum(1 for c in _TOASCII if c["output"] is not None and not _dns_holds(c["output"])) \
        == TOASCII_NOT_DNS_NAMES


# --- w3lib canonicalize_url: the cases about normalisation we claim ----------------------------

def _w3lib_claimed_cases() -> list[dict]:
    """Default keyword arguments only (encodings, keep_fragments... are w3lib options we don't have),
    string input of an absolute http(s) URL (w3lib also canonicalises relative and sftp URLs)."""
    data = json.loads((TESTDATA / "w3lib" / "w3lib_recorded_url_calls.json").read_text(encoding="utf-8"))
    out = []
    for case in data["cases"]:
        if case["func"] != "canonicalize_url" or case["kwargs"] or case["error"] or case["input_was_bytes"]:
            continue
        url = case["args"][0]
        if url.strip().lower().startswith(("http://", "https://")):
            out.append(case)
    return out


W3LIB_ALLOWED = {
    "http://www.example.com/do?c=3&b=5&b=2&a=50":
        "we sort by name only (stable): the order of a repeated name can matter to the site",
    "http://www.example.com/do?b=&a=2": "an empty value is written `b`, as crawler-commons does (w3lib: `b=`)",
    "http://www.example.com/do?b=&c&a=2": "an empty value is written `b`, as crawler-commons does (w3lib: `b=`)",
    "http://www.example.com/do?1750,4": "a pair without `=` stays as it is (w3lib form-encodes it as a name)",
    "http://www.example.com/do?q=a space&a=1": "query is not form-re-encoded: space is %20, not `+` (crawler-commons)",
    "http://www.example.com/do?q=a%20space&a=1": "query is not form-re-encoded: %20 stays (crawler-commons)",
    "https://example.com/a%23b%2cc#bash": "%2C is a sub-delim escape; RFC 3986 §2.2: not equivalent to `,`",
    "http://.éxamplé.com/résumé?q=résumé": "empty DNS label: not fetchable (w3lib leaves the host unconverted)",
    "http://www.éxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplééxamplé.com/résumé?q=résumé":
        "DNS label over 63 octets: not fetchable (w3lib leaves the host unconverted)",
}
_W3LIB = _w3lib_claimed_cases()


# One rule instead of an allow-list entry per case: w3lib keeps userinfo (`user:pass@`), we drop it (a
# fetch would send it as Basic auth, then archive and publish it); the rest of its answer must agree.
_USERINFO = re.compile(r"^(https?://)[^/?#@]*@")


@pytest.mark.parametrize("case", _W3LIB, ids=[c["args"][0] for c in _W3LIB])
def test_w3lib_canonicalize_url_case_agrees(case: dict) -> None:
    url = case["args"][0]
    ours = normalize_url(url)
    if url in W3LIB_ALLOWED:
        assert ours != case["result"], f"allow-listed case now agrees, drop it: {url!r}"
        return
    assert ours == _USERINFO.sub(r"\1", case["result"])


def test_allow_lists_stay_small() -> None:
    """A growing allow-list is a regression in disguise: keep each under its current size."""
    assert len(CC_NORMALIZER_ALLOWED) <= 1
    assert len(CC_RESOLVE_ALLOWED) <= 2
    assert len(WPT_ALLOWED) <= 4
    assert len(W3LIB_ALLOWED) <= 9


def test_every_allow_listed_case_exists_in_its_suite() -> None:
    """A stale allow-list entry would hide nothing yet read as a known difference."""
    assert set(CC_NORMALIZER_ALLOWED) <= {r[0] for r in _CC_PAIRS}
    assert set(CC_RESOLVE_ALLOWED) <= {r[0] for r in _CC_RESOLVE}
    assert set(WPT_ALLOWED) <= {(c["input"], c.get("base")) for c in _WPT}
    assert set(W3LIB_ALLOWED) <= {c["args"][0] for c in _W3LIB}
