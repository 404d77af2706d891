"""bench.bench_page_path: the split of parse's CPU it prints comes from real served pages."""
from __future__ import annotations

import re

from bench.bench_page_path import fetch_result, main, served_pages
from udfs.page_facts import parse_result


def test_served_pages_are_html_pages_the_parse_step_reads_with_their_links() -> None:
    pages = served_pages(5, 20, seed=3)
    assert len(pages) == 5
    for host, url, reply in pages:
        assert url.startswith(f"http://{host}:")
        bundle = parse_result(fetch_result(host, url, reply))
        assert bundle["page"] is not None and bundle["page"]["links"]


def test_the_report_names_every_native_step_and_the_python_remainder(capsys) -> None:
    assert main(["--pages", "5", "--hosts", "20"]) == 0
    out = capsys.readouterr().out
    for step in ("inflate", "deflate the payload, level 6", "digests", "decode UTF-8", "lexbor", "whole parse step"):
        assert step in out
    native = re.search(r"of it native[^\n]*?(\d+\.\d+) ms/page", out)
    assert native is not None and float(native.group(1)) > 0
