"""udfs.urls over the links of real pages (webdata/trafilatura_eval): fast path, idempotence, slot keys."""
from __future__ import annotations

import gzip
import html
import json
import re

import pytest

from tests.paths import WEBDATA
from udfs.urls import DEFAULT_URL_POLICY, _is_clean, _normalize_full, host_key, normalize_url, url_fp

_HREF = re.compile(rb"""<a\s[^>]*?href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)
_PAGES = 150  # about 20,000 links: every rule meets real input, and the test stays near a second


@pytest.fixture(scope="module")
def real_links() -> list[tuple[str, str]]:
    corpus = WEBDATA / "trafilatura_eval"
    links: list[tuple[str, str]] = []
    with open(corpus / "manifest.jsonl", encoding="utf-8") as manifest:
        for _, line in zip(range(_PAGES), manifest):
            page = json.loads(line)
            body = gzip.open(corpus / page["file"]).read()
            for m in _HREF.finditer(body):
                raw = (m.group(1) or m.group(2) or m.group(3) or b"").decode("utf-8", "replace")
                links.append((html.unescape(raw), page["url"]))
    return links


def test_real_links_normalise_idempotently_with_a_slot_key(real_links: list[tuple[str, str]]) -> None:
    normalised = [normalize_url(href, base) for href, base in real_links]
    kept = [u for u in normalised if u is not None]
    assert len(kept) > 0.9 * len(real_links)  # the rest: javascript:, mailto:, tel:, broken hosts
    for url in kept:
        assert normalize_url(url) == url
        assert host_key(url)
        assert 0 <= url_fp(url) < 2**64


def test_fast_path_agrees_with_full_parse_on_real_links(real_links: list[tuple[str, str]]) -> None:
    urls = {normalize_url(href, base) for href, base in real_links} - {None}
    clean = [u for u in urls | {href for href, _ in real_links} if _is_clean(u, DEFAULT_URL_POLICY)]
    assert len(clean) > 0.5 * len(urls), "the fast path should serve most already-normal links"
    assert [u for u in clean if _normalize_full(u, None, DEFAULT_URL_POLICY) != u] == []
