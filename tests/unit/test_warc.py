"""udfs.warc: golden bytes with a fixed clock and ids, parse-back with warcio, header rewriting,
digests over exactly the stored bytes, one gzip member per record, and hostile input."""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import itertools
import zlib
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from udfs.warc import (
    GZIP_HEADER,
    PROFILE_IDENTICAL_PAYLOAD,
    PROFILE_SERVER_NOT_MODIFIED,
    RevisitTarget,
    WarcBuilder,
    WarcPolicy,
    digest,
    format_date,
    safe_uri,
    stored_http_headers,
)

CRLF = "\r\n"
FIXED = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
URL = "http://example.com/page?q=1"
ID = "<urn:uuid:00000000-0000-4000-8000-{:012d}>"


def builder(start: int = 1, policy: WarcPolicy | None = None) -> WarcBuilder:
    counter = itertools.count(start)
    return WarcBuilder(policy=policy or WarcPolicy(), ids=lambda: ID.format(next(counter)), clock=lambda: FIXED)


def crlf(*lines: str) -> bytes:
    return CRLF.join(lines).encode()


ORIGINAL = RevisitTarget(ID.format(2), URL, "2026-01-02T03:04:05.678901Z", "sha1:W3N4WQRZLF5DWDHQ4HCTGEQSOELIOZM2")
LATER = datetime(2026, 2, 1, tzinfo=timezone.utc)


def every_record_type(b: WarcBuilder):
    """warcinfo, response + request, both revisit profiles, metadata and a truncated response."""
    info = b.warcinfo("crawl-0-00001.warc.gz", [("isPartOf", "test-crawl")])
    response, request = b.capture(
        URL, [("Host", "example.com"), ("User-Agent", "test-bot/1.0")], 200, "OK",
        [("Content-Type", "text/html"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")],
        b"<p>hi</p>", ip="127.0.0.2", warcinfo_id=info.record_id)
    same = b.revisit_identical(URL, 200, "OK", [("Content-Type", "text/html"), ("Content-Length", "9")],
                               b"<p>hi</p>", ORIGINAL, date=LATER)
    not_modified = b.revisit_not_modified(URL, 304, "Not Modified", [("ETag", '"v1"')], ORIGINAL, date=LATER)
    meta = b.metadata(URL, [("dedup-verdict", "near-duplicate"), ("duplicate-of", "http://example.com/other")],
                      concurrent_to=response.record_id)
    capped = b.response("http://example.com/big", 200, "OK", [("Content-Length", "100000")], b"x" * 10,
                        truncated="length", warcinfo_id=info.record_id)
    return [info, response, request, same, not_modified, meta, capped]


GOLDEN = [
    crlf("WARC/1.1", "WARC-Type: warcinfo", f"WARC-Record-ID: {ID.format(1)}",
         "WARC-Date: 2026-01-02T03:04:05.678901Z", "WARC-Filename: crawl-0-00001.warc.gz",
         "WARC-Block-Digest: sha1:5RXOYQOMZB26QMP3ZNGV2NQNHRIEULM3", "Content-Type: application/warc-fields",
         "Content-Length: 175", "",
         "software: flink-crawler/0.1.0", "format: WARC File Format 1.1",
         "conformsTo: http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
         "isPartOf: test-crawl", "", "", ""),
    crlf("WARC/1.1", "WARC-Type: response", f"WARC-Record-ID: {ID.format(2)}",
         "WARC-Date: 2026-01-02T03:04:05.678901Z", f"WARC-Target-URI: {URL}", "WARC-IP-Address: 127.0.0.2",
         f"WARC-Warcinfo-ID: {ID.format(1)}", "WARC-Block-Digest: sha1:5Q3SFULZFKTXGUH3XBXRJAQE4APDGJYB",
         "WARC-Payload-Digest: sha1:W3N4WQRZLF5DWDHQ4HCTGEQSOELIOZM2",
         "Content-Type: application/http;msgtype=response", "Content-Length: 144", "",
         "HTTP/1.1 200 OK", "Content-Type: text/html", "X-Crawler-Content-Encoding: gzip",
         "X-Crawler-Transfer-Encoding: chunked", "Content-Length: 9", "", "<p>hi</p>", "", ""),
    crlf("WARC/1.1", "WARC-Type: request", f"WARC-Record-ID: {ID.format(3)}",
         "WARC-Date: 2026-01-02T03:04:05.678901Z", f"WARC-Target-URI: {URL}", "WARC-IP-Address: 127.0.0.2",
         f"WARC-Warcinfo-ID: {ID.format(1)}", f"WARC-Concurrent-To: {ID.format(2)}",
         "WARC-Block-Digest: sha1:GIH7RZPUFNRPEFMDWG3XIBYPALSHERAU",
         "Content-Type: application/http;msgtype=request", "Content-Length: 71", "",
         "GET /page?q=1 HTTP/1.1", "Host: example.com", "User-Agent: test-bot/1.0", "", "", "", ""),
    crlf("WARC/1.1", "WARC-Type: revisit", f"WARC-Record-ID: {ID.format(4)}",
         "WARC-Date: 2026-02-01T00:00:00.000000Z", f"WARC-Target-URI: {URL}",
         f"WARC-Profile: {PROFILE_IDENTICAL_PAYLOAD}", f"WARC-Refers-To: {ID.format(2)}",
         f"WARC-Refers-To-Target-URI: {URL}", "WARC-Refers-To-Date: 2026-01-02T03:04:05.678901Z",
         "WARC-Block-Digest: sha1:XIPXGCCP4ED6IP23H2TTPO5P3WUFEAWG",
         "WARC-Payload-Digest: sha1:W3N4WQRZLF5DWDHQ4HCTGEQSOELIOZM2",
         "Content-Type: application/http;msgtype=response", "Content-Length: 63", "",
         "HTTP/1.1 200 OK", "Content-Type: text/html", "Content-Length: 9", "", "", "", ""),
    crlf("WARC/1.1", "WARC-Type: revisit", f"WARC-Record-ID: {ID.format(5)}",
         "WARC-Date: 2026-02-01T00:00:00.000000Z", f"WARC-Target-URI: {URL}",
         f"WARC-Profile: {PROFILE_SERVER_NOT_MODIFIED}", f"WARC-Refers-To: {ID.format(2)}",
         f"WARC-Refers-To-Target-URI: {URL}", "WARC-Refers-To-Date: 2026-01-02T03:04:05.678901Z",
         "WARC-Block-Digest: sha1:GZSYTJNN2AXO4MM63FFBKPBZPYMWZVDX",
         "WARC-Payload-Digest: sha1:W3N4WQRZLF5DWDHQ4HCTGEQSOELIOZM2",
         "Content-Type: application/http;msgtype=response", "Content-Length: 60", "",
         "HTTP/1.1 304 Not Modified", 'ETag: "v1"', "Content-Length: 0", "", "", "", ""),
    crlf("WARC/1.1", "WARC-Type: metadata", f"WARC-Record-ID: {ID.format(6)}",
         "WARC-Date: 2026-01-02T03:04:05.678901Z", f"WARC-Target-URI: {URL}",
         f"WARC-Concurrent-To: {ID.format(2)}", "WARC-Block-Digest: sha1:BLKOCK3YCNUJORESXU6KTAKDGRA6KASF",
         "Content-Type: application/warc-fields", "Content-Length: 71", "",
         "dedup-verdict: near-duplicate", "duplicate-of: http://example.com/other", "", "", ""),
]


@pytest.mark.parametrize("index", range(len(GOLDEN)),
                         ids=["warcinfo", "response", "request", "revisit-identical", "revisit-304", "metadata"])
def test_record_bytes_match_golden_with_fixed_clock_and_ids(index):
    assert every_record_type(builder())[index].to_bytes() == GOLDEN[index]


def test_digests_are_sha1_base32_of_exactly_the_stored_block_and_payload():
    response = every_record_type(builder())[1]
    expected_block = "sha1:" + base64.b32encode(hashlib.sha1(response.block).digest()).decode()
    assert response.header("WARC-Block-Digest") == expected_block
    assert response.header("WARC-Payload-Digest") == "sha1:" + base64.b32encode(
        hashlib.sha1(b"<p>hi</p>").digest()).decode()
    assert response.block.endswith(b"\r\n\r\n<p>hi</p>")


def parse(data: bytes) -> list:
    """Every record of a WARC byte string through warcio, digests checked (raises on a mismatch)."""
    out = []
    for record in ArchiveIterator(io.BytesIO(data), check_digests="raise"):
        payload = record.content_stream().read()
        out.append((record, payload))
    return out


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_every_record_type_round_trips_through_warcio_with_digests_checked(compressed):
    records = every_record_type(builder())
    data = b"".join(r.to_gzip() if compressed else r.to_bytes() for r in records)
    parsed = parse(data)
    assert [p.rec_type for p, _ in parsed] == [r.info.warc_type for r in records]
    assert [p.rec_headers.get_header("WARC-Record-ID") for p, _ in parsed] == [r.record_id for r in records]
    response, payload = parsed[1]
    assert payload == b"<p>hi</p>"
    assert response.http_headers.get_statuscode() == "200"
    assert response.http_headers.get_header("X-Crawler-Content-Encoding") == "gzip"
    assert response.digest_checker.passed is not False
    assert parsed[2][0].rec_headers.get_header("WARC-Concurrent-To") == records[1].record_id
    assert parsed[6][0].rec_headers.get_header("WARC-Truncated") == "length"
    assert parsed[6][0].http_headers.get_header("X-Crawler-Content-Length") == "100000"


def test_gzip_form_is_exactly_one_member_per_record_and_inflates_to_the_plain_form():
    for record in every_record_type(builder()):
        member = record.to_gzip()
        inflater = zlib.decompressobj(wbits=31)
        assert inflater.decompress(member) == record.to_bytes()
        assert inflater.eof and inflater.unused_data == b""
        assert gzip.decompress(member) == record.to_bytes()


def test_gzip_level_is_applied_and_output_is_reproducible():
    record = every_record_type(builder())[1]
    assert record.to_gzip(1) == record.to_gzip(1)
    assert gzip.decompress(record.to_gzip(9)) == record.to_bytes()


def test_capture_links_request_to_response_and_shares_one_date():
    response, request = builder().capture(URL, [], 200, "OK", [], b"")
    assert request.header("WARC-Concurrent-To") == response.record_id
    assert request.date == response.date == "2026-01-02T03:04:05.678901Z"


def test_revisits_carry_refers_to_fields_and_profile():
    _, _, _, same, not_modified, *_ = every_record_type(builder())
    for record, profile in ((same, PROFILE_IDENTICAL_PAYLOAD), (not_modified, PROFILE_SERVER_NOT_MODIFIED)):
        assert record.header("WARC-Profile") == profile
        assert record.header("WARC-Refers-To") == ORIGINAL.record_id
        assert record.header("WARC-Refers-To-Target-URI") == ORIGINAL.target_uri
        assert record.header("WARC-Refers-To-Date") == ORIGINAL.date
        assert record.info.mime == "warc/revisit"
    assert b"<p>hi</p>" not in same.block


def test_revisit_not_modified_without_known_digest_has_no_payload_digest():
    original = RevisitTarget(ID.format(2), URL, "2026-01-02T03:04:05Z")
    record = builder().revisit_not_modified(URL, 304, "Not Modified", [], original)
    assert record.header("WARC-Payload-Digest") is None and record.info.digest is None


@pytest.mark.parametrize("headers, length, expected", [
    ([("Content-Length", "9")], 9, [("Content-Length", "9")]),
    ([("content-length", "900")], 9, [("X-Crawler-content-length", "900"), ("Content-Length", "9")]),
    ([("Content-Length", "9"), ("Content-Length", "9")], 9,
     [("Content-Length", "9"), ("X-Crawler-Content-Length", "9")]),
    ([("Transfer-Encoding", "chunked")], 3, [("X-Crawler-Transfer-Encoding", "chunked"), ("Content-Length", "3")]),
    ([("Content-Encoding", "br")], 0, [("X-Crawler-Content-Encoding", "br"), ("Content-Length", "0")]),
    ([("Content-Encoding", "identity")], 0, [("Content-Encoding", "identity"), ("Content-Length", "0")]),
    ([("X-A", "1\r\nInjected: yes")], 0, [("X-A", "1  Injected: yes"), ("Content-Length", "0")]),
    ([("Bad Name:", " v ")], 0, [("Bad_Name_", "v"), ("Content-Length", "0")]),
    ([("", "v")], 0, [("_", "v"), ("Content-Length", "0")]),
], ids=["length-kept", "length-renamed", "duplicate-length", "chunked", "content-encoding", "identity",
        "crlf-injection", "bad-name", "empty-name"])
def test_stored_headers_describe_the_stored_payload(headers, length, expected):
    assert stored_http_headers(headers, length) == expected


def test_header_order_and_repeated_headers_are_preserved():
    headers = [("Set-Cookie", "a=1"), ("Vary", "x"), ("Set-Cookie", "b=2")]
    block = builder().response(URL, 200, "OK", headers, b"").block
    assert block.index(b"Set-Cookie: a=1") < block.index(b"Vary: x") < block.index(b"Set-Cookie: b=2")


def test_surrogate_escaped_header_bytes_are_written_back_as_received():
    value = b"caf\xe9".decode("utf-8", "surrogateescape")
    assert b"X-Name: caf\xe9\r\n" in builder().response(URL, 200, "OK", [("X-Name", value)], b"").block


def test_sha256_policy_writes_base32_sha256_digests_that_warcio_verifies():
    records = every_record_type(builder(policy=WarcPolicy(digest_algorithm="sha256")))
    assert records[1].header("WARC-Payload-Digest") == digest(b"<p>hi</p>", "sha256")
    assert records[1].header("WARC-Payload-Digest").startswith("sha256:")
    assert len(parse(b"".join(r.to_gzip() for r in records))) == len(records)


def test_warcio_detects_a_corrupted_block_so_the_round_trip_check_has_teeth():
    data = bytearray(every_record_type(builder())[1].to_bytes())
    data[data.index(b"<p>hi")] = ord("X")
    with pytest.raises(Exception, match="digest"):
        parse(bytes(data))


@pytest.mark.parametrize("when, precision, expected", [
    (FIXED, "microseconds", "2026-01-02T03:04:05.678901Z"),
    (FIXED, "seconds", "2026-01-02T03:04:05Z"),
    (FIXED.astimezone(timezone(timedelta(hours=2))), "seconds", "2026-01-02T03:04:05Z"),
    (0.5, "microseconds", "1970-01-01T00:00:00.500000Z"),
], ids=["micro", "seconds", "other-zone", "epoch"])
def test_warc_dates_are_utc_at_the_chosen_precision(when, precision, expected):
    assert format_date(when, precision) == expected


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        format_date(datetime(2026, 1, 1))


def test_seconds_precision_policy_reaches_the_records():
    record = builder(policy=WarcPolicy(date_precision="seconds")).metadata(URL, [])
    assert record.header("WARC-Date") == "2026-01-02T03:04:05Z"


@pytest.mark.parametrize("url, expected", [
    ("http://example.com/a b", "http://example.com/a%20b"),
    ("http://example.com/caf\u00e9", "http://example.com/caf%C3%A9"),
    ("http://example.com/\r\nx", "http://example.com/%0D%0Ax"),
    ("http://example.com/ok?x=1#f", "http://example.com/ok?x=1#f"),
])
def test_target_uris_never_carry_spaces_controls_or_non_ascii(url, expected):
    assert safe_uri(url) == expected


@pytest.mark.parametrize("kwargs, message", [
    ({"digest_algorithm": "md5"}, "digest_algorithm"),
    ({"date_precision": "millis"}, "date_precision"),
    ({"gzip_level": 0}, "gzip_level"),
    ({"gzip_level": 10}, "gzip_level"),
    ({"software": "a\nb"}, "software"),
    ({"pack_in_parse": "yes"}, "pack_in_parse"),
    ({"group_commit_ms": -1}, "group_commit_ms"),
    ({"group_commit_ms": 10_001}, "group_commit_ms"),
    ({"group_commit_ms": True}, "group_commit_ms"),
])
def test_policy_rejects_bad_values_with_a_message_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WarcPolicy(**kwargs)


@pytest.mark.parametrize("call, message", [
    (lambda b: b.response(URL, 200, "OK", [], b"", truncated="size"), "WARC-Truncated"),
    (lambda b: b.response(URL, 42, "OK", [], b""), "status"),
    (lambda b: b.response(URL, 200, "OK", [], b"", http_version="SPDY"), "http_version"),
    (lambda b: b.request(URL, method="GET /x"), "method"),
    (lambda b: b.metadata(URL, [], concurrent_to="urn:uuid:no-brackets"), "record id"),
    (lambda b: WarcBuilder(ids=lambda: "not an id").metadata(URL, []), "record id"),
])
def test_programming_errors_raise_value_error_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call(builder())


@pytest.mark.parametrize("reason", ["time", "disconnect", "unspecified"])
def test_every_truncation_reason_of_the_spec_is_accepted(reason):
    record = builder().response(URL, 200, "OK", [], b"x", truncated=reason)
    assert record.header("WARC-Truncated") == reason


def test_default_ids_and_clock_make_unique_aware_records():
    a, b = WarcBuilder().metadata(URL, []), WarcBuilder().metadata(URL, [])
    assert a.record_id != b.record_id and a.record_id.startswith("<urn:uuid:")
    assert a.date.endswith("Z")


headers_strategy = st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), max_size=8)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers=headers_strategy, body=st.binary(max_size=3000), status=st.integers(100, 599),
       reason=st.text(max_size=30), url=st.text(max_size=60), compressed=st.booleans())
@example(headers=[("Content-Length", "5")], body=b"abc", status=200, reason="OK", url="", compressed=False)
@example(headers=[("Transfer-Encoding", "chunked")], body=b"3\r\nabc\r\n0\r\n\r\n", status=200, reason="",
         url="", compressed=True)
@example(headers=[("Content-Encoding", "gzip")], body=gzip.compress(b"x"), status=200, reason="OK", url="",
         compressed=False)
@example(headers=[(" ", "\r\n\r\nHTTP/1.1 500 X")], body=b"\r\n\r\nWARC/1.1\r\n", status=599,
         reason="\r\n", url=" \n", compressed=False)
def test_any_headers_and_body_build_a_record_warcio_parses_with_valid_digests(
        headers, body, status, reason, url, compressed):
    record = builder().response("http://example.com/" + url, status, reason, headers, body)
    data = record.to_gzip() if compressed else record.to_bytes()
    [(parsed, payload)] = parse(data)
    assert parsed.rec_type == "response"
    assert payload == body
    assert parsed.http_headers.get_statuscode() == str(status)
    assert parsed.rec_headers.get_header("WARC-Target-URI") == record.info.target_uri


@pytest.mark.parametrize("url, line", [
    ("http://example.com", b"GET / HTTP/1.1"),
    ("http://example.com?x=1", b"GET /?x=1 HTTP/1.1"),
    ("http://example.com/p?q#frag", b"GET /p?q HTTP/1.1"),
    ("http://[broken/a b", b"GET /a%20b HTTP/1.1"),
    ("not a url", b"GET / HTTP/1.1"),
])
def test_request_line_uses_the_origin_form_of_the_url_and_never_raises(url, line):
    assert builder().request(url).block.split(b"\r\n")[0] == line


def test_odd_text_in_warc_fields_is_written_not_raised():
    b = builder()
    info = b.warcinfo("name-\udcff\n.warc.gz", [("operator", "\ud800 lone surrogate")])
    [(parsed, _)] = parse(info.to_bytes())
    assert parsed.rec_headers.get_header("WARC-Filename").startswith("name-")


# --- packed response blocks (decision 1823) -----------------------------------------------------

PAGE_HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"), ("Content-Length", "12")]


def page_body(size: int) -> bytes:
    return b"".join(b"<p>line %d of a page, some of it repeated</p>\n" % i for i in range(size // 40))[:size]


@pytest.mark.parametrize("size", [0, 9, 200_000], ids=["empty", "small", "200KB"])
@pytest.mark.parametrize("level", [1, 6, 9])
def test_a_packed_block_makes_the_same_record_as_the_plain_body(size, level):
    body = page_body(size)
    plain = builder(policy=WarcPolicy(gzip_level=level)).response(
        URL, 200, "OK", PAGE_HEADERS, body, ip="127.0.0.2", warcinfo_id=ID.format(7), truncated="length")
    packer = builder(policy=WarcPolicy(gzip_level=level))
    packed = packer.response(URL, 0, "", [], packer.pack_response(200, "OK", PAGE_HEADERS, body),
                             ip="127.0.0.2", warcinfo_id=ID.format(7), truncated="length")
    assert packed.fields == plain.fields and packed.info == plain.info
    assert packed.to_bytes() == plain.to_bytes()
    member = packed.to_gzip(level)
    assert member.startswith(GZIP_HEADER)
    inflater = zlib.decompressobj(wbits=31)
    assert inflater.decompress(member) == plain.to_bytes()
    assert inflater.eof and inflater.unused_data == b""
    assert len(member) <= len(plain.to_gzip(level)) * 1.02 + 64   # a second deflate stream costs little


def test_packed_members_read_back_from_their_offsets_with_digests_checked():
    b = builder()
    bodies = [page_body(50_000), b"<p>hi</p>", page_body(3_000)]
    members = [b.response(URL, 200, "OK", PAGE_HEADERS, b.pack_response(200, "OK", PAGE_HEADERS, body)).to_gzip()
               for body in bodies]
    data = b"".join(members)
    assert [payload for _, payload in parse(data)] == bodies
    offset = len(members[0])
    [(record, payload)] = parse(data[offset:offset + len(members[1])])
    assert record.rec_type == "response" and payload == b"<p>hi</p>"


def test_a_revisit_of_a_packed_payload_states_the_plain_payload_digest_and_length():
    body = page_body(10_000)
    plain = builder().revisit_identical(URL, 200, "OK", PAGE_HEADERS, body, ORIGINAL, date=LATER)
    packer = builder()
    packed = packer.revisit_identical(URL, 200, "OK", PAGE_HEADERS, packer.pack_response(200, "OK", PAGE_HEADERS, body),
                                      ORIGINAL, date=LATER)
    assert packed.to_bytes() == plain.to_bytes()
    assert packed.header("WARC-Payload-Digest") == digest(body)


def test_a_block_packed_with_another_digest_algorithm_is_refused():
    packed = builder(policy=WarcPolicy(digest_algorithm="sha256")).pack_response(200, "OK", [], b"x")
    with pytest.raises(ValueError, match="digest_algorithm"):
        builder().response(URL, 200, "OK", [], packed)


def test_packing_refuses_what_a_response_record_refuses():
    with pytest.raises(ValueError, match="status"):
        builder().pack_response(42, "OK", [], b"")
