"""A broken rel=canonical in the real job (issue #5, decisions 1804, 1820): a small site whose pages name
a canonical that answers 404, and one whose canonical is fine; the job on a MiniCluster with a real
Kafka broker. The pages are published with a `hint` verdict, the canonical is fetched, and each page
that named it gets a `canonical_revised` record on crawl.status, keyed like its pages.parsed record:
the two that named it before its fetch when the 404 comes back, the one that names it afterwards at
once. The page whose canonical answered 200 keeps its hint.

The site is served by a thread in this process (http.server), so the test says exactly which page
names which canonical; `/b.html` also links to its canonical, so one entry carries both.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from crawler.crawl import records_since
from tests.integration.harness import loop_config, start_crawl_job
from udfs.records import TOPIC_PAGES, TOPIC_STATUS
from udfs.urls import url_fp

pytestmark = pytest.mark.integration

HOST = "canon.test"
DELAY_S = 0.3
DEADLINE_S = 120.0
WORDS = "harbour lantern orchard granite meadow copper violet thunder quarry saddle willow ember".split()


def _page(title: str, canonical: str | None, links: list[str]) -> bytes:
    head = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    text = " ".join(WORDS[(i * len(title)) % len(WORDS)] for i in range(120))   # distinct per page
    anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    return (f"<html><head><title>{title}</title>{head}</head><body><p>{title}: {text}</p>{anchors}"
            f"</body></html>").encode()


def _site(base: str) -> dict[str, bytes]:
    """Path → body; any other path answers 404 (robots.txt too: allow all)."""
    return {
        "/": _page("Home", None, ["/a.html", "/b.html", "/ok.html", "/c.html"]),
        "/a.html": _page("Alpha shoes", f"{base}/gone.html", []),
        "/b.html": _page("Bravo boots of the harbour", f"{base}/gone.html", ["/gone.html"]),
        "/c.html": _page("Charlie", f"{base}/ok.html", []),
        "/ok.html": _page("The real thing, fine and well", None, ["/d.html"]),
        "/d.html": _page("Delta sandals, late", f"{base}/gone.html", []),
    }


@pytest.fixture(scope="module")
def canonical_run(kafka_bootstrap: str, flink_connector_jar: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("canonical")
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    base = f"http://{HOST}:{server.server_address[1]}"
    site = _site(base)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:   # noqa: N802 - http.server's name
            body = site.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            body = body if body is not None else b"<html><body>not found</body></html>"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server.RequestHandlerClass = Handler
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (work / "host-map.txt").write_text(f"{HOST} 127.0.0.1\n")
    (work / "seeds.txt").write_text(f"{base}/\n")
    config = loop_config(work, SimpleNamespace(host_map=work / "host-map.txt"), DELAY_S,
                         "fetch.total_timeout_s=5.0", "frontier.lease_timeout_s=20.0")
    revised: list[tuple[bytes | None, dict]] = []
    try:
        client, start_ms = start_crawl_job(config, kafka_bootstrap, flink_connector_jar, "canonical-test",
                                           work / "seeds.txt")
        try:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline and len(revised) < 3:
                time.sleep(3)
                revised = [(k, record) for k, record in ((k, json.loads(v)) for k, v in
                                                         records_since(kafka_bootstrap, TOPIC_STATUS, start_ms))
                           if record.get("type") == "canonical_revised"]
            time.sleep(3)   # anything more would have come by now
        finally:
            client.cancel().result()
        pages = [json.loads(v) for _, v in records_since(kafka_bootstrap, TOPIC_PAGES, start_ms)]
        status = [(k, json.loads(v)) for k, v in records_since(kafka_bootstrap, TOPIC_STATUS, start_ms)]
    finally:
        server.shutdown()
    yield {"base": base, "pages": pages,
           "revised": [(k, r) for k, r in status if r.get("type") == "canonical_revised"]}


def test_pages_are_published_with_a_hint(canonical_run):
    base = canonical_run["base"]
    verdicts = {p["url"]: p.get("canonical") for p in canonical_run["pages"]}
    for path, canonical in (("/a.html", "/gone.html"), ("/b.html", "/gone.html"), ("/c.html", "/ok.html"),
                            ("/d.html", "/gone.html")):
        assert verdicts[base + path] == {"url": base + canonical, "trust": "hint",
                                         "reason": "same site, not verified"}, path


def test_each_page_that_named_the_404_canonical_is_revised_once_and_no_other(canonical_run):
    base = canonical_run["base"]
    revised = canonical_run["revised"]
    by_page = {record["url"]: (key, record) for key, record in revised}
    assert len(revised) == len(by_page) == 3, revised
    assert {url: record["reason"] for url, (_, record) in by_page.items()} == {
        f"{base}/a.html": "canonical answered 404",         # named it before its fetch: answered by it
        f"{base}/b.html": "canonical answered 404",
        f"{base}/d.html": "canonical answered 404 or 410",  # named it after: answered from its row
    }
    for url, (key, record) in by_page.items():
        assert key == str(url_fp(url)).encode()             # keyed like the page's pages.parsed record
        assert (record["v"], record["canonical"], record["trust"]) == (1, f"{base}/gone.html", "ignored")
