"""A render's WARC records: each sub-resource the browser fetched as a response + request pair, then
the rendered DOM as a conversion record that refers to the page's response; files with them pass
warcio, FastWARC and jwarc."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.unit.test_warc import builder
from tests.warc_validators import assert_all_accept, jwarc_available
from udfs.render_capture import RENDERED_DOM_TYPE, SubresourceCapture, render_records

PAGE = "http://app.site.test/products/1"
SHELL = b'<html><body><div id="root"></div><script src="/static/app.js"></script></body></html>'
DOM = '<html><head><title>Product 1</title></head><body><div id="root"><h1>Product 1</h1>' \
      '<a href="/products/2">next</a> caf\u00e9</div></body></html>'
SUBS = (
    SubresourceCapture("http://app.site.test/static/app.js", 200, "OK", (("Content-Type", "text/javascript"),),
                       b"console.log('app');", (("Host", "app.site.test"),), "127.1.0.9"),
    SubresourceCapture("http://app.site.test/api/page?path=/products/1", 200, "OK",
                       (("Content-Type", "application/json"),), b'{"title": "Product 1"}'),
)


def archive(tmp_path: Path) -> tuple[Path, str]:
    make = builder()
    response, request = make.capture(PAGE, (), 200, "OK", (("Content-Type", "text/html"),), SHELL, date=1_700_000_000.0)
    records = [response, request, *render_records(make, PAGE, response.record_id, DOM, SUBS, 1_700_000_005.0, None)]
    path = tmp_path / "render.warc.gz"
    path.write_bytes(b"".join(r.to_gzip() for r in records))
    return path, response.record_id


def test_sub_resources_come_as_response_and_request_pairs_then_the_dom_refers_to_the_page(tmp_path):
    path, page_id = archive(tmp_path)
    with path.open("rb") as handle:
        records = [(r.rec_type, r.rec_headers, r.content_stream().read()) for r in ArchiveIterator(handle)]
    assert [kind for kind, _, _ in records] == ["response", "request", "response", "request", "response", "request",
                                               "conversion"]
    assert [headers.get_header("WARC-Target-URI") for _, headers, _ in records[2:6:2]] == [s.url for s in SUBS]
    assert [body for kind, _, body in records[2:6:2]] == [s.body for s in SUBS]
    kind, headers, body = records[-1]
    assert headers.get_header("WARC-Refers-To") == page_id and headers.get_header("WARC-Target-URI") == PAGE
    assert headers.get_header("Content-Type") == RENDERED_DOM_TYPE and body == DOM.encode("utf-8")
    assert headers.get_header("WARC-Date").startswith("2023-11-14T22:13:25")


@pytest.mark.skipif(not jwarc_available(), reason="java is not installed (jwarc's validator)")
def test_a_file_with_a_render_passes_every_validator(tmp_path):
    path, _ = archive(tmp_path)
    assert_all_accept(path)


def test_a_render_that_fetched_nothing_still_keeps_its_dom():
    make = builder()
    (record,) = render_records(make, PAGE, "<urn:uuid:00000000-0000-4000-8000-000000000001>", "<html></html>", (),
                               1_700_000_000.0, None)
    assert record.info.warc_type == "conversion" and record.info.mime == "text/html"
    assert next(iter(ArchiveIterator(io.BytesIO(record.to_gzip())))).rec_type == "conversion"
