"""Decision 1823: parse packs an archived response's block, the writer joins it into the record.

Whatever parse packs, the writer's records, dedup's owner row and the completion say what they say
for the plain body; results the writer archives without a payload are left as they were.
"""
from __future__ import annotations

import gzip
import itertools
from datetime import datetime, timezone

import pytest

from operators.dedup import owner_capture, probe_of
from udfs.page_facts import pack_payload, parse_result, payload_digest, payload_length
from udfs.page_events import completion_event
from udfs.warc_capture import bundle_records
from udfs.dedup import DedupPolicy, RevisitOf, unique_verdict
from udfs.urls import url_fp
from udfs.warc import PackedBlock, WarcBuilder, WarcPolicy, digest

URL = "http://shop.example.com/a.html"
BODY = b"<html><head><title>A page</title></head><body>%s</body></html>" % b"".join(
    b"<p>Some text of the page, sentence %d. <a href='/p%d.html'>next</a></p>\n" % (i, i) for i in range(400))
FIXED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def result(status: int | None = 200, fetch_status: str = "ok", body: bytes = BODY, **request_fields) -> dict:
    request = {"host": "shop.example.com", "url": URL, "fp": url_fp(URL), "kind": "page", "lease_id": "h/r-1",
               "depth": 1, "attempt": 1, **request_fields}
    return {"request": request, "fetch_status": fetch_status, "reason": "", "http_status": status,
            "http_reason": "OK", "headers": [("Content-Type", "text/html"), ("Content-Encoding", "gzip")],
            "request_headers": [("User-Agent", "test-bot/1.0")], "body": body, "ip": "127.0.0.1",
            "started_at": 1.0, "done_at": 2.0, "truncated": None}


def builder(policy: WarcPolicy = WarcPolicy()) -> WarcBuilder:
    counter = itertools.count()
    return WarcBuilder(policy=policy, ids=lambda: f"<urn:uuid:00000000-0000-4000-8000-{next(counter):012d}>",
                       clock=lambda: FIXED)


def written(records) -> list[bytes]:
    return [gzip.decompress(record.to_gzip()) for record in records]


def test_a_packed_page_drops_its_body_and_keeps_what_the_writer_and_dedup_need():
    plain = parse_result(result())
    packed = pack_payload(plain, builder())
    assert isinstance(packed["packed"], PackedBlock) and packed["result"]["body"] == b""
    assert plain["result"]["body"] == BODY              # the parsed bundle itself is not changed
    assert packed["page"] == plain["page"] and packed["content_hash"] == plain["content_hash"]
    assert payload_length(packed) == payload_length(plain) == len(BODY)
    assert payload_digest(packed, "sha1") == payload_digest(plain, "sha1") == digest(BODY)
    assert len(packed["packed"].deflated) < len(BODY) / 3


@pytest.mark.parametrize("verdict", [
    None,
    unique_verdict("<urn:uuid:00000000-0000-4000-8000-00000000abcd>"),
    {"response_id": None, "duplicate_of": "http://shop.example.com/b.html", "near": None,
     "revisit_of": RevisitOf(record_id="<urn:uuid:00000000-0000-4000-8000-00000000beef>",
                             target_uri="http://shop.example.com/b.html", date="2026-01-01T00:00:00Z")},
], ids=["no verdict", "unique", "exact duplicate"])
def test_the_writer_writes_the_same_records_from_a_packed_page(verdict):
    plain = parse_result(result())
    packed = pack_payload(parse_result(result()), builder())
    if verdict is not None:
        plain["dedup"] = packed["dedup"] = verdict
    assert written(bundle_records(builder(), packed, "<urn:uuid:info>")) == \
        written(bundle_records(builder(), plain, "<urn:uuid:info>"))
    assert completion_event(packed) == completion_event(plain)


def test_dedup_sees_the_same_owner_row_and_probe_for_a_packed_page():
    plain = parse_result(result())
    packed = pack_payload(parse_result(result()), builder())
    assert owner_capture(packed, WarcPolicy()) == owner_capture(plain, WarcPolicy())
    assert probe_of(packed, DedupPolicy(), WarcPolicy()) == probe_of(plain, DedupPolicy(), WarcPolicy())


@pytest.mark.parametrize("fetched", [
    result(status=None, fetch_status="dns_error", body=b""),
    result(status=304, body=b"", etag='"v1"', revisit_of={"record_id": "<urn:uuid:x>", "target_uri": URL,
                                                          "date": "2026-01-01T00:00:00Z"}),
], ids=["no response", "recrawl 304"])
def test_results_archived_without_a_payload_are_not_packed(fetched):
    bundle = parse_result(fetched)
    assert pack_payload(bundle, builder()) is bundle


def test_a_truncated_page_is_packed_with_its_cut_body_and_its_reason_reaches_the_record():
    cut = result(fetch_status="too_large", body=BODY[:5000])
    cut["truncated"] = "length"
    packed = pack_payload(parse_result(cut), builder())
    [response, _] = bundle_records(builder(), packed, None)
    assert response.header("WARC-Truncated") == "length"
    assert response.to_bytes().endswith(BODY[:5000] + b"\r\n\r\n")


def test_a_status_no_record_can_hold_is_left_for_the_writer_to_report():
    bundle = parse_result(result(status=42))
    assert pack_payload(bundle, builder()) is bundle
