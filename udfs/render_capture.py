"""The WARC records of one render (decision 3902): what the browser fetched and the DOM it built.

A rendered page keeps its original response record as the crawl wrote it. Beside it go, in this order:
each sub-resource the render fetched as a response + request pair (the browser's captures, so the page
replays with its scripts, styles and API answers), then one `conversion` record holding the rendered DOM
as `text/html`, linked to the page's response by WARC-Refers-To. All are dated with the render's end.
Pure: records come from `udfs.warc.WarcBuilder`; the writer appends them like any capture's.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from udfs.warc import WarcBuilder, WarcRecord

RENDERED_DOM_TYPE = "text/html; charset=utf-8"


@dataclass(frozen=True)
class SubresourceCapture:
    """One response a render fetched: what the browser got, headers as received, body decoded."""

    url: str
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    request_headers: tuple[tuple[str, str], ...] = ()
    ip: str | None = None


def render_records(builder: WarcBuilder, page_url: str, page_response_id: str, dom: str,
                   subresources: Iterable[SubresourceCapture], rendered_at: float,
                   warcinfo_id: str | None) -> list[WarcRecord]:
    """The records a render adds to the archive: each sub-resource's response and request, then the DOM."""
    records: list[WarcRecord] = []
    for sub in subresources:
        response, request = builder.capture(sub.url, sub.request_headers, sub.status, sub.reason, sub.headers,
                                            sub.body, date=rendered_at, ip=sub.ip, warcinfo_id=warcinfo_id)
        records += [response, request]
    records.append(builder.conversion(page_url, dom.encode("utf-8"), RENDERED_DOM_TYPE, page_response_id,
                                      date=rendered_at, warcinfo_id=warcinfo_id))
    return records
