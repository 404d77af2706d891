"""The WARC records that archive one page fetch, and where a written record lies.

A fetch is archived as a response + request record pair (WARC 1.1 §6.3-6.4). As dedup decides
(decisions 1300-1301), an exact duplicate of another capture becomes an identical-payload revisit +
request, and a near-duplicate adds a metadata record beside its response; a recrawl's 304 becomes a
server-not-modified revisit + request (decision 1113). A rendered page adds its render's records after
them: the sub-resources the browser fetched and the rendered DOM as a conversion record (decision 3902).
Robots.txt, tdmrep.json and probe answers are not archived. Pure: the records come from `udfs.warc.WarcBuilder`; `operators.warc_files` writes them.
"""
from __future__ import annotations

import dataclasses

from udfs.dedup import DedupVerdict, metadata_fields
from udfs.fetch_status import is_archived, is_not_modified, warc_http_version
from udfs.page_facts import ParsedBundle, rendered_dom
from udfs.records import FetchResult, response_url
from udfs.render_capture import SubresourceCapture, render_records
from udfs.warc import PackedBlock, RevisitTarget, WarcBuilder, WarcRecord


@dataclasses.dataclass(frozen=True)
class Location:
    """Where one record's gzip member lies: the file path as published, byte offset and length."""

    path: str
    offset: int
    length: int


def capture_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None,
                    response_id: str | None = None, packed: PackedBlock | None = None) -> list[WarcRecord]:
    """Response then request record of one archived fetch (WARC 1.1 §6.3-6.4); [] if not archived.

    Both are dated with the fetch's time (`done_at`), the WARC-Date dedup records for revisits. With
    `packed` (decision 1823) the response block is that one and the result's body is not read.
    """
    if not is_archived(result):
        return []
    assert result["http_status"] is not None
    response, request = builder.capture(
        response_url(result), result.get("request_headers", []), result["http_status"],
        result["http_reason"], result["headers"], result["body"] if packed is None else packed,
        date=result["done_at"], ip=result["ip"], truncated=result["truncated"], warcinfo_id=warcinfo_id,
        http_version=warc_http_version(result), response_id=response_id)
    return [response, request]


def revisit_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None,
                    verdict: DedupVerdict, packed: PackedBlock | None = None) -> list[WarcRecord]:
    """Identical-payload revisit then request record of an exact duplicate (WARC 1.1 §6.7.2): the
    payload is not stored again; WARC-Refers-To names the owner's response record."""
    assert verdict["revisit_of"] is not None and result["http_status"] is not None
    url = response_url(result)
    revisit = builder.revisit_identical(
        url, result["http_status"], result["http_reason"], result["headers"],
        result["body"] if packed is None else packed, RevisitTarget(**verdict["revisit_of"]), date=result["done_at"],
        ip=result["ip"], warcinfo_id=warcinfo_id, http_version=warc_http_version(result))
    request = builder.request(url, result.get("request_headers", []), date=result["done_at"], ip=result["ip"],
                              concurrent_to=revisit.record_id, warcinfo_id=warcinfo_id,
                              http_version=warc_http_version(result))
    return [revisit, request]


def bundle_records(builder: WarcBuilder, bundle: ParsedBundle, warcinfo_id: str | None) -> list[WarcRecord]:
    """The records of one page bundle as dedup decided (`fetch_records`), then, for a rendered page,
    its render's (`udfs.render_capture.render_records`), which refer to the first."""
    records = fetch_records(builder, bundle, warcinfo_id)
    result = bundle["result"]
    dom = rendered_dom(result)
    if records and dom is not None:
        render = result["render"]  # type: ignore[typeddict-item]
        subresources = [SubresourceCapture(c["url"], c["status"], c["reason"], tuple(map(tuple, c["headers"])),
                                           c["body"], tuple(map(tuple, c.get("request_headers") or ())), c.get("ip"))
                        for c in render.get("captures") or ()]
        records += render_records(builder, response_url(result), records[0].record_id, dom.decode("utf-8"),
                                  subresources, result["done_at"], warcinfo_id)
    return records


def fetch_records(builder: WarcBuilder, bundle: ParsedBundle, warcinfo_id: str | None) -> list[WarcRecord]:
    """The records of one page fetch as dedup decided: a revisit + request for
    an exact duplicate; else response + request, plus a metadata record (WARC 1.1 §6.6, concurrent
    to the response) for a near-duplicate; plain `capture_records` for bundles dedup did not see."""
    result, verdict, packed = bundle["result"], bundle.get("dedup"), bundle.get("packed")
    if is_not_modified(result):
        return not_modified_records(builder, result, warcinfo_id)
    if verdict is None or not is_archived(result):
        return capture_records(builder, result, warcinfo_id, packed=packed)
    if verdict["revisit_of"] is not None:
        return revisit_records(builder, result, warcinfo_id, verdict, packed)
    records = capture_records(builder, result, warcinfo_id, verdict["response_id"], packed)
    near, simhash = verdict["near"], bundle["simhash"]
    if near is not None and simhash is not None:
        records.append(builder.metadata(response_url(result), metadata_fields(near, simhash),
                                        date=result["done_at"], concurrent_to=records[0].record_id,
                                        warcinfo_id=warcinfo_id))
    return records


def not_modified_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None) -> list[WarcRecord]:
    """Server-not-modified revisit then request record of a recrawl's 304 (WARC 1.1 §6.7.3):
    WARC-Refers-To names the previous capture the frontier carried in `request.revisit_of`."""
    assert result["http_status"] is not None
    original = result["request"]["revisit_of"]
    url = response_url(result)
    revisit = builder.revisit_not_modified(
        url, result["http_status"], result["http_reason"], result["headers"],
        RevisitTarget(original["record_id"], original["target_uri"], original["date"], original.get("payload_digest")),
        date=result["done_at"], ip=result["ip"], warcinfo_id=warcinfo_id, http_version=warc_http_version(result))
    request = builder.request(url, result.get("request_headers", []), date=result["done_at"], ip=result["ip"],
                              concurrent_to=revisit.record_id, warcinfo_id=warcinfo_id,
                              http_version=warc_http_version(result))
    return [revisit, request]


def capture_of(bundle: ParsedBundle, records: list[WarcRecord]) -> dict[str, str | None] | None:
    """The full capture a later revisit of this URL refers to (Completion.capture): the
    response record written now, or the capture this fetch's revisit referred to; None if neither."""
    if not records:
        return None
    head = records[0]
    if head.info.warc_type == "response":
        return {"record_id": head.record_id, "target_uri": head.header("WARC-Target-URI"), "date": head.date,
                "payload_digest": head.header("WARC-Payload-Digest")}
    verdict = bundle.get("dedup")
    if verdict is not None and verdict["revisit_of"] is not None:
        return dict(verdict["revisit_of"])
    return bundle["result"]["request"].get("revisit_of")
