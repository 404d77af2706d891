"""SimHash near-duplicate detection on real pages: precision and recall at Hamming distance k = 3.

Near pairs are a real page and the same page changed the way recrawled pages change: a timestamp
line, an inserted ad block (both in the HTML, so extraction is exercised), or a few percent of the
words replaced. Far pairs are different real pages, including pages of the same host (shared
templates: the hard negatives). bench/bench_extract.py runs the same measurement on every page.
"""
from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.paths import WEBDATA
from udfs.links import extract
from udfs.simhash import band_keys, hamming, simhash

CORPORA = ("trafilatura_eval", "scrapinghub_aeb")
# Near-duplicate detection needs enough text to be meaningful: a timestamp is 10% of a 60-word page.
MIN_WORDS = 300
WORD_CHANGE_RATE = 0.03
K = 3
_HTML_HEADERS = {"content-type": "text/html"}
_BODY_OPEN = re.compile(rb"<body[^>]*>", re.IGNORECASE)
_PARAGRAPH_END = re.compile(rb"</p\s*>", re.IGNORECASE)
_AD = (
    b'<div class="ad-slot"><a href="https://ads.example.net/click?id=7731">Sponsored</a> '
    b"Save up to 40 percent on premium noise cancelling headphones this week only. "
    b"Free shipping on orders over fifty dollars, limited stock, terms apply.</div>"
)


@dataclass(frozen=True)
class Page:
    corpus: str
    host: str
    html: bytes
    text: str


def load_pages(limit_per_corpus: int | None = None, stride: int = 1) -> list[Page]:
    """Real pages with at least MIN_WORDS words of main text, in manifest order (every `stride`-th)."""
    pages = []
    for corpus in CORPORA:
        folder = WEBDATA / corpus
        kept = 0
        for number, line in enumerate((folder / "manifest.jsonl").read_text().splitlines()):
            if number % stride:
                continue
            record = json.loads(line)
            html = gzip.decompress((folder / record["file"]).read_bytes())
            url = record.get("url") or "http://unknown.example/"
            text = extract(url, _HTML_HEADERS, html).text
            if len(text.split()) < MIN_WORDS:
                continue
            pages.append(Page(corpus, url.split("/")[2] if "//" in url else "", html, text))
            kept += 1
            if limit_per_corpus is not None and kept >= limit_per_corpus:
                break
    return pages


def with_timestamp(page: Page, rng: random.Random) -> str:
    """The page re-rendered with a 'last updated' line at the top of the body."""
    stamp = f"<p>Last updated {rng.randint(1, 28)} November 2026, {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} UTC</p>"
    match = _BODY_OPEN.search(page.html)
    at = match.end() if match else 0
    return extract("http://x.example/", _HTML_HEADERS, page.html[:at] + stamp.encode() + page.html[at:]).text


def with_ad_block(page: Page, rng: random.Random) -> str:
    """The page with an ad block inserted after a paragraph near the middle of the HTML."""
    ends = [m.end() for m in _PARAGRAPH_END.finditer(page.html)]
    at = ends[len(ends) // 2] if ends else len(page.html) // 2
    return extract("http://x.example/", _HTML_HEADERS, page.html[:at] + _AD + page.html[at:]).text


def with_changed_words(page: Page, rng: random.Random, rate: float = WORD_CHANGE_RATE) -> str:
    """The page text with `rate` of its words replaced by other words of the same page."""
    words = page.text.split()
    for index in rng.sample(range(len(words)), max(1, int(len(words) * rate))):
        words[index] = rng.choice(words) + "x"
    return " ".join(words)


VARIANTS = {"timestamp": with_timestamp, "ad_block": with_ad_block, "words": with_changed_words}


def near_pairs(pages: list[Page], seed: int = 7) -> Iterator[tuple[str, str, str]]:
    """(variant name, original text, changed text) for every page and variant."""
    rng = random.Random(seed)
    for page in pages:
        for name, change in VARIANTS.items():
            yield name, page.text, change(page, rng)


def far_pairs(pages: list[Page], random_pairs: int, seed: int = 11) -> Iterator[tuple[str, str, str]]:
    """("same_host" | "random", text, text) for different pages; every same-host pair plus random ones."""
    by_host: dict[str, list[Page]] = {}
    for page in pages:
        by_host.setdefault(page.host, []).append(page)
    for group in by_host.values():
        for i, first in enumerate(group):
            for second in group[i + 1:]:
                if first.text != second.text:
                    yield "same_host", first.text, second.text
    rng = random.Random(seed)
    for _ in range(random_pairs):
        first, second = rng.sample(pages, 2)
        if first.text != second.text:
            yield "random", first.text, second.text


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    near: int
    far: int
    missed: dict[str, int]
    false_hits: dict[str, int]


def score(pages: list[Page], random_far: int, k: int = K, shingle: int | None = None) -> Score:
    """Precision and recall of `hamming(simhash(a), simhash(b)) <= k` as the near-duplicate verdict."""
    def fp(text: str) -> int:
        return simhash(text) if shingle is None else simhash(text, shingle)

    missed: dict[str, int] = {}
    false_hits: dict[str, int] = {}
    near = far = true_hits = 0
    for name, a, b in near_pairs(pages):
        near += 1
        if hamming(fp(a), fp(b)) <= k:
            true_hits += 1
        else:
            missed[name] = missed.get(name, 0) + 1
    for name, a, b in far_pairs(pages, random_far):
        far += 1
        if hamming(fp(a), fp(b)) <= k:
            false_hits[name] = false_hits.get(name, 0) + 1
    hits = true_hits + sum(false_hits.values())
    return Score(true_hits / hits if hits else 1.0, true_hits / near if near else 0.0, near, far, missed, false_hits)


@pytest.fixture(scope="module")
def sample_pages() -> list[Page]:
    return load_pages(limit_per_corpus=40, stride=7)


def test_sample_has_enough_pages_for_a_meaningful_figure(sample_pages: list[Page]) -> None:
    assert len(sample_pages) >= 60


def test_near_duplicates_found_at_k3_with_required_precision_and_recall(sample_pages: list[Page]) -> None:
    result = score(sample_pages, random_far=400)
    assert result.precision >= 0.95, result
    assert result.recall >= 0.90, result


def test_near_pairs_share_a_band_key_when_within_k(sample_pages: list[Page]) -> None:
    for _name, a, b in near_pairs(sample_pages[:20]):
        fa, fb = simhash(a), simhash(b)
        if hamming(fa, fb) <= K:
            assert set(band_keys(fa, K)) & set(band_keys(fb, K))


def test_changed_page_is_not_an_exact_copy(sample_pages: list[Page]) -> None:
    # Guards the measurement itself: a variant that changed nothing would inflate recall.
    rng = random.Random(1)
    page = sample_pages[0]
    for change in VARIANTS.values():
        assert change(page, rng) != page.text

