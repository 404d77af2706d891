"""FetchPolicy defaults and validation, and the pure fetch helpers: decoding caps, Retry-After, redirects."""
from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from udfs.config import ConfigError, build_section
from udfs.fetch_status import (
    DECODE_ERRORS,
    MAX_RETRY_AFTER_S,
    CappedDecoder,
    UnsupportedEncoding,
    brotli_window,
    fetch_result,
    is_complete_page,
    redirect_target,
    retry_after_seconds,
)
from udfs.netguard import FetchPolicy, parse_nameserver
from udfs.records import FetchRequest, FetchStatus


def test_defaults_are_the_documented_limits() -> None:
    policy = FetchPolicy()
    assert (policy.connect_timeout_s, policy.first_byte_timeout_s, policy.total_timeout_s) == (3.0, 5.0, 10.0)
    assert policy.max_body_bytes == 10 * 1024 * 1024 and policy.robots_max_redirects == 5
    assert policy.robots_max_bytes >= 500 * 1024
    assert "+https://" in policy.user_agent and policy.user_agent.startswith("FlinkCrawler/")


@pytest.mark.parametrize("overrides, message", [
    ({"user_agent": ""}, "one non-empty line"),
    ({"user_agent": "Bot/1.0\r\nX: y"}, "one non-empty line"),
    ({"user_agent": "Bot/1.0"}, "contact URL"),
    ({"connect_timeout_s": 0}, "connect_timeout_s must be positive"),
    ({"first_byte_timeout_s": 11.0}, "exceeds total_timeout_s"),
    ({"max_body_bytes": 0}, "max_body_bytes must be at least 1"),
    ({"robots_max_bytes": 1000}, "at least 500 KiB"),
    ({"robots_max_redirects": 50}, "robots_max_redirects"),
    ({"min_speed_bytes_per_s": -1}, "must not be negative"),
    ({"allowed_content_types": ("Text/HTML",)}, "allowed_content_types"),
    ({"sitemap_content_types": ("gzip",)}, "sitemap_content_types"),
    ({"allow_cidrs": ("127.0.0.1/8",)}, "allow_cidrs: '127.0.0.1/8' is not a CIDR range"),
    ({"deny_cidrs": ("nonsense",)}, "deny_cidrs"),
    ({"host_map": ("broken-line",)}, "line 1"),
    ({"max_decoded_html_bytes": 0}, "max_decoded_html_bytes must be at least 1"),
    ({"max_decoded_in_flight_bytes": 1024}, "max_decoded_in_flight_bytes"),
    ({"decoded_budget_wait_s": -1.0}, "decoded_budget_wait_s"),
    ({"dns_timeout_s": 0}, "dns_timeout_s must be positive"),
    ({"dns_tries": 0}, "dns_tries"),
    ({"dns_max_concurrent": 0}, "dns_max_concurrent must be at least 1"),
    ({"dns_max_concurrent_per_domain": 100}, "exceeds dns_max_concurrent"),
    ({"dns_nameservers": ("dns.example",)}, "dns_nameservers: 'dns.example'"),
    ({"dns_nameservers": ("10.0.0.1:99999",)}, "dns_nameservers"),
    ({"dns_nameservers": ("[::1",)}, "dns_nameservers"),
])
def test_invalid_policies_are_refused_with_a_message_naming_the_problem(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        FetchPolicy(**overrides)


def test_memory_and_dns_defaults_are_the_documented_ones() -> None:
    policy = FetchPolicy()
    assert (policy.max_decoded_bytes, policy.max_decoded_html_bytes) == (20 * 1024 * 1024, 5 * 1024 * 1024)
    assert (policy.max_decoded_in_flight_bytes, policy.decoded_budget_wait_s) == (512 * 1024 * 1024, 1.0)
    assert (policy.dns_nameservers, policy.dns_timeout_s, policy.dns_tries) == ((), 3.0, 2)
    assert (policy.dns_max_concurrent, policy.dns_max_concurrent_per_domain) == (64, 4)


@pytest.mark.parametrize("content_type, robots, cap", [
    ("text/html; charset=utf-8", False, 5), ("application/xhtml+xml", False, 5), (None, False, 5), ("", False, 5),
    ("application/xml", False, 20), ("text/plain", False, 20), ("application/gzip", False, 20),
    ("text/html", True, 0.5),
])
def test_html_gets_the_smaller_decoded_cap(content_type: str | None, robots: bool, cap: float) -> None:
    assert FetchPolicy().decoded_cap(content_type, robots) == int(cap * 1024 * 1024)


def test_no_decoded_cap_exceeds_the_general_one() -> None:
    policy = FetchPolicy(max_decoded_bytes=300 * 1024, max_decoded_html_bytes=4 * 1024 * 1024)
    assert policy.decoded_cap("text/html") == policy.decoded_cap(None, robots=True) == 300 * 1024


@pytest.mark.parametrize("server, parsed", [
    ("10.0.0.1", ("10.0.0.1", 53)), ("127.0.0.53:5353", ("127.0.0.53", 5353)), ("::1", ("::1", 53)),
    ("[2001:db8::1]:5353", ("2001:db8::1", 5353)), ("[::1]", ("::1", 53)), (" 10.0.0.2 ", ("10.0.0.2", 53)),
])
def test_nameservers_are_ip_or_ip_and_port(server: str, parsed: tuple[str, int]) -> None:
    assert parse_nameserver(server) == parsed


def test_config_section_builds_the_policy_and_rejects_unknown_keys() -> None:
    policy = build_section("fetch", {"allow_cidrs": ["127.0.0.0/8"], "total_timeout_s": 20})
    assert policy.allow_cidrs == ("127.0.0.0/8",) and policy.total_timeout_s == 20.0
    with pytest.raises(ConfigError, match="unknown key"):
        build_section("fetch", {"follow_redirects": True})


@pytest.mark.parametrize("content_type, allowed", [
    ("text/html", True), ("text/html; charset=utf-8", True), ("TEXT/HTML", True),
    ("application/xhtml+xml", True), ("image/png", False), ("application/pdf", False), (None, True), ("", True),
])
def test_content_type_allow_list_ignores_parameters_and_case(content_type: str | None, allowed: bool) -> None:
    assert FetchPolicy().content_type_allowed(content_type) is allowed


def test_missing_content_type_can_be_refused() -> None:
    assert not FetchPolicy(allow_missing_content_type=False).content_type_allowed(None)
    assert not FetchPolicy(allow_missing_content_type=False).content_type_allowed(None, sitemap=True)


@pytest.mark.parametrize("content_type, page, sitemap", [
    ("application/gzip", False, True), ("Application/X-GZIP; charset=binary", False, True),
    ("application/octet-stream", False, True), ("application/xml", True, True), ("text/plain", True, True),
    ("image/png", False, False), ("application/zip", False, False),
])
def test_a_sitemap_lease_also_accepts_the_types_gzip_files_are_served_as(content_type: str, page: bool,
                                                                         sitemap: bool) -> None:
    """Decision 1817: `sitemap.xml.gz` comes as application/gzip or octet-stream, never a page type."""
    policy = FetchPolicy()
    assert policy.sitemap_content_types == ("application/gzip", "application/x-gzip", "application/octet-stream")
    assert policy.content_type_allowed(content_type) is page
    assert policy.content_type_allowed(content_type, sitemap=True) is sitemap


def test_the_sitemap_types_are_configured_apart_from_the_page_types() -> None:
    policy = build_section("fetch", {"sitemap_content_types": ["application/x-bzip2"]})
    assert policy.content_type_allowed("application/x-bzip2", sitemap=True)
    assert not policy.content_type_allowed("application/gzip", sitemap=True)
    assert not policy.content_type_allowed("application/x-bzip2")
    assert not FetchPolicy(sitemap_content_types=()).content_type_allowed("application/gzip", sitemap=True)


PAYLOAD = b"<html>" + b"hello world " * 5000 + b"</html>"


def _encoded(encoding: str, data: bytes) -> bytes:
    return {"gzip": gzip.compress(data), "x-gzip": gzip.compress(data), "deflate": zlib.compress(data),
            "br": brotli.compress(data), "identity": data}[encoding]


def _feed(decoder: CappedDecoder, data: bytes, step: int = 997) -> bytes:
    return b"".join(decoder.feed(data[i:i + step]) for i in range(0, len(data), step))


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate", "br", "identity"])
def test_decoder_restores_the_payload_in_any_chunking(encoding: str) -> None:
    decoder = CappedDecoder(encoding, len(PAYLOAD))
    assert _feed(decoder, _encoded(encoding, PAYLOAD)) == PAYLOAD and not decoder.over_limit


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "identity"])
def test_decoder_stops_exactly_at_the_cap(encoding: str) -> None:
    decoder = CappedDecoder(encoding, 1000)
    out = _feed(decoder, _encoded(encoding, PAYLOAD))
    assert out == PAYLOAD[:1000] and decoder.over_limit


def test_raw_deflate_without_zlib_wrapper_is_accepted() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = compressor.compress(PAYLOAD) + compressor.flush()
    assert _feed(CappedDecoder("deflate", len(PAYLOAD)), raw) == PAYLOAD


def test_concatenated_gzip_members_are_all_decoded() -> None:
    assert _feed(CappedDecoder("gzip", 100), gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "identity"])
@pytest.mark.parametrize("max_out", [1, 1000, 65536])
def test_decoder_gives_its_output_in_slices_of_the_room_asked(encoding: str, max_out: int) -> None:
    """Output that does not fit stays inside (`pending`) and comes at the next feed, with or without
    new input: a caller can decode in slices its memory budget has room for."""
    decoder = CappedDecoder(encoding, 10 * len(PAYLOAD))
    wire, out, largest = _encoded(encoding, PAYLOAD), bytearray(), 0
    for i in range(0, len(wire), 4096):
        piece = decoder.feed(wire[i:i + 4096], max_out)
        while True:
            largest = max(largest, len(piece))
            out += piece
            if not decoder.pending:
                break
            piece = decoder.feed(b"", max_out)
    assert bytes(out) == PAYLOAD and largest <= max_out


def test_a_brotli_bomb_decoded_in_slices_stops_at_the_cap() -> None:
    decoder = CappedDecoder("br", 3 * 1024 * 1024)
    bomb, total, calls = brotli.compress(b"\0" * (50 * 1024 * 1024)), 0, 0
    piece = decoder.feed(bomb, 256 * 1024)
    while True:
        assert len(piece) <= 256 * 1024
        total, calls = total + len(piece), calls + 1
        if not decoder.pending:
            break
        piece = decoder.feed(b"", 256 * 1024)
    assert decoder.over_limit and total == 3 * 1024 * 1024 and calls >= 12


@pytest.mark.parametrize("lgwin", [10, 16, 17, 18, 22, 24])
def test_the_brotli_window_is_read_from_the_streams_first_byte(lgwin: int) -> None:
    stream = brotli.compress(PAYLOAD, lgwin=lgwin)
    assert brotli_window(stream[0]) == (1 << lgwin) - 16


def test_gzip_bomb_yields_at_most_the_cap() -> None:
    bomb = gzip.compress(b"\0" * (20 * 1024 * 1024))
    decoder = CappedDecoder("gzip", 64 * 1024)
    out = decoder.feed(bomb)
    assert len(out) == 64 * 1024 and decoder.over_limit and decoder.feed(b"more") == b""


@pytest.mark.parametrize("encoding", ["compress", "zstd", "gzip, br", "snappy"])
def test_unsupported_encodings_are_refused(encoding: str) -> None:
    with pytest.raises(UnsupportedEncoding, match="unsupported Content-Encoding"):
        CappedDecoder(encoding, 10)


def test_corrupt_gzip_raises_a_decode_error() -> None:
    with pytest.raises(DECODE_ERRORS):
        CappedDecoder("gzip", 100).feed(b"\x1f\x8b\x08\x00garbage-garbage")


@pytest.mark.parametrize("value, expected", [
    ("120", 120.0), ("0", 0.0), (" 5 ", 5.0), ("999999999", MAX_RETRY_AFTER_S),
    ("Mon, 30 Nov 2026 00:01:00 GMT", 60.0), ("Mon, 30 Nov 2026 00:00:00 GMT", 0.0),
    ("Sun, 29 Nov 2026 23:00:00 GMT", 0.0), ("soon", None), ("-5", None), ("", None), ("1.5", None),
])
def test_retry_after_reads_seconds_and_dates(value: str, expected: float | None) -> None:
    now = 1_795_996_800.0  # Mon, 30 Nov 2026 00:00:00 GMT
    assert retry_after_seconds([("Retry-After", value)], now) == expected


def test_retry_after_absent_is_none() -> None:
    assert retry_after_seconds([("Content-Type", "text/html")], 0.0) is None


@pytest.mark.parametrize("status, location, expected", [
    (301, "/b?y=2", "http://a.test/b?y=2"),
    (302, "http://OTHER.test:80/x", "http://other.test/x"),
    (307, "//c.test/", "http://c.test/"),
    (308, "https://a.test/#frag", "https://a.test/"),
    (301, "", None), (301, None, None), (200, "/b", None), (304, "/b", None),
    (301, "javascript:alert(1)", None), (301, "http://[bad", None),
])
def test_redirect_target_is_the_normalised_location_of_a_3xx(status: int, location: str | None,
                                                             expected: str | None) -> None:
    headers = [] if location is None else [("Location", location)]
    assert redirect_target("http://a.test/a", status, headers) == expected


def test_fetch_result_defaults_url_and_carries_status_value() -> None:
    request = FetchRequest(host="a.test", url="http://a.test/", fp=1, kind="page", lease_id="L", depth=0, attempt=0)
    result = fetch_result(request, FetchStatus.BLOCKED, reason="why", started_at=1.0, done_at=2.0)
    assert (result["url"], result["fetch_status"], result["body"], result["headers"]) == (
        "http://a.test/", "blocked", b"", [])
    assert not is_complete_page(result)
    assert is_complete_page({**result, "fetch_status": "too_large", "http_status": 200})
