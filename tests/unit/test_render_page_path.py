"""A rendered page goes down the page path like any other (decision 3903): parse reads its title, text and
links from the DOM its scripts built, pages.parsed says it was rendered (and validates), and the WARC keeps
the response, the render's sub-resources and the DOM as a conversion record referring to the response. A
plain page that needs its scripts says why, within the crawl's render share."""
from __future__ import annotations

import io
import json

import jsonschema
from warcio.archiveiterator import ArchiveIterator

from operators.parse import ParseFunction
from tests.paths import ROOT
from udfs.fetch_status import fetch_result
from udfs.page_events import parsed_page
from udfs.page_facts import parse_result
from udfs.records import FetchRequest, FetchStatus, encode
from udfs.render_policy import RenderPolicy
from udfs.warc import WarcBuilder, WarcPolicy
from udfs.warc_capture import Location, bundle_records

URL = "http://app.test/items/7"
SHELL = (b'<!doctype html><html><head><title>App</title><script defer src="/static/app.js"></script></head>'
         b'<body><div id="root"></div></body></html>')
DOM = ('<html><head><title>Item 7</title></head><body><div id="root"><h1>Item 7</h1>'
       '<p>Everything about item seven, as its scripts wrote it.</p>'
       '<a href="/items/8">next</a><a href="/items/9">more</a></div></body></html>')
CAPTURE = {"url": "http://app.test/static/app.js", "status": 200, "reason": "OK",
           "headers": [("Content-Type", "text/javascript")], "body": b"render();",
           "request_headers": [("User-Agent", "TestBot")], "ip": "127.0.0.9", "at": 1_767_225_601.0}
ON = RenderPolicy(enabled=True, max_share=1.0)
SCHEMA = jsonschema.Draft202012Validator(json.loads((ROOT / "schemas" / "pages.parsed.v1.json").read_text()))


def result(body: bytes = SHELL, render: dict | None = None, **request_fields):
    request = FetchRequest(host="app.test", url=URL, fp=7, kind="page", lease_id="app.test/1", depth=1,  # type: ignore[typeddict-item]
                           attempt=1, **request_fields)
    fetched = fetch_result(request, FetchStatus.OK, started_at=1_767_225_600.0, done_at=1_767_225_602.0,
                           http_status=200, http_reason="OK", http_version="1.1",
                           headers=[("Content-Type", "text/html; charset=utf-8")], body=body, ip="127.0.0.9")
    if render is not None:
        fetched["render"] = render  # type: ignore[typeddict-unknown-key]
    return fetched


def rendered(dom: str = DOM, captures: list | None = None) -> dict:
    return {"reason": "app_root", "dom": dom, "error": None, "timed_out": False, "seconds": 1.2,
            "requests": {"fetched": 1}, "cache_hits": 0, "captures": [CAPTURE] if captures is None else captures}


def test_a_rendered_page_is_read_from_its_dom_and_hashed_as_archived():
    plain, done = parse_result(result()), parse_result(result(render=rendered()))
    assert plain["page"]["links"] == [] and done["page"]["title"] == "Item 7"
    assert [url for url, _ in done["page"]["links"]] == ["http://app.test/items/8", "http://app.test/items/9"]
    assert done["content_hash"] == plain["content_hash"]   # the response's payload, as the WARC holds it
    assert "render_wanted" not in parse_result(result(render=rendered()), render=ON)   # rendered already


def test_a_render_that_gave_no_dom_leaves_the_page_as_fetched():
    bundle = parse_result(result(render={**rendered(dom=""), "error": "browser unavailable: no chromium"}))
    assert bundle["page"]["title"] == "App" and bundle["page"]["links"] == []


def test_an_app_shell_asks_to_be_rendered_and_the_hosts_mode_decides_first():
    assert parse_result(result(), render=ON)["render_wanted"] == "app_root"
    assert "render_wanted" not in parse_result(result(), render=RenderPolicy(enabled=False))
    assert "render_wanted" not in parse_result(result(), render=None)
    assert "render_wanted" not in parse_result(result(render_mode="never"), render=ON)
    full = b"<html><body><p>" + b"plain words " * 100 + b"</p></body></html>"
    assert "render_wanted" not in parse_result(result(full), render=ON)
    assert parse_result(result(full, render_mode="always"), render=ON)["render_wanted"] == "host_always"


def test_pages_parsed_says_a_page_was_rendered_and_validates():
    where = Location("crawl/x.warc.gz", 0, 100)
    page = json.loads(encode(dict(parsed_page(parse_result(result(render=rendered())), where))))
    SCHEMA.validate(page)
    assert page["rendered"] == "app_root" and page["title"] == "Item 7" and len(page["links"]) == 2
    assert "rendered" not in parsed_page(parse_result(result()), where)


def test_the_warc_keeps_the_response_the_subresources_and_the_dom_referring_to_the_response():
    builder = WarcBuilder(WarcPolicy())
    records = bundle_records(builder, parse_result(result(render=rendered())), None)
    stream = io.BytesIO(b"".join(r.to_gzip() for r in records))
    read = [(r.rec_headers.get_header("WARC-Type"), r.rec_headers.get_header("WARC-Target-URI"),
             r.rec_headers.get_header("WARC-Record-ID"), r.rec_headers.get_header("WARC-Refers-To"),
             r.content_stream().read()) for r in ArchiveIterator(stream)]
    assert [kind for kind, *_ in read] == ["response", "request", "response", "request", "conversion"]
    assert read[2][1] == CAPTURE["url"] and read[2][4] == b"render();"
    assert read[4][1] == URL and read[4][3] == read[0][2] and read[4][4] == DOM.encode()
    assert len(bundle_records(builder, parse_result(result()), None)) == 2


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


def test_parse_keeps_the_pages_chosen_for_rendering_within_the_share_and_counts_them():
    parse = ParseFunction(render=RenderPolicy(enabled=True, max_share=0.25))
    parse._counters = {name: _Counter() for name in (
        "pages", "skipped", "errors", "links", "optout_reserved", "soft_404", "sitemaps", "sitemap_urls",
        "rendered", "render_app_root", "render_share_cap", "render_host_always", "render_near_empty",
        "render_noscript", *(f"limit_{r}" for r in ("depth", "elements", "cpu", "memory", "crashed")))}
    chosen = [("render_wanted" in bundle) for _ in range(8) for bundle in parse.flat_map(result())]
    # the first page may always go; then at most a quarter of the pages seen, plus one
    assert chosen[0] and sum(chosen) <= 0.25 * 8 + 1 and not all(chosen)
    assert parse._counters["render_app_root"].count == sum(chosen)
    assert parse._counters["render_share_cap"].count == 8 - sum(chosen)
    list(parse.flat_map(result(render=rendered())))
    assert parse._counters["rendered"].count == 1


def test_a_rendered_page_whose_shell_is_another_pages_is_no_alias():
    from udfs.page_events import discovered_batches, is_alias

    verdict = {"response_id": None, "revisit_of": {"record_id": "<urn:uuid:1>", "target_uri": "http://app.test/",
                                                   "date": "2026-01-01T00:00:00Z", "payload_digest": None},
               "duplicate_of": "http://app.test/", "near": None}
    plain = {**parse_result(result()), "dedup": verdict}
    done = {**parse_result(result(render=rendered())), "dedup": verdict}
    assert is_alias(plain) and not is_alias(done)
    page = parsed_page(done, Location("crawl/x.warc.gz", 0, 100))
    assert page["duplicate_of"] is None and len(page["links"]) == 2
    assert sum(len(b["urls"]) for b in discovered_batches(done)) == 2
