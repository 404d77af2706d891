"""Parse-step figures on the real pages: extraction + links + SimHash time, parser and language
choices, and SimHash near-duplicate precision/recall by shingle size.

    .venv/bin/python bench/bench_extract.py [--pages 400] [--stride 3]

Bounded loops over local files only (no network). Figures feed docs/decisions/0300-0302.
"""
from __future__ import annotations

import argparse
import codecs
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.paths import WEBDATA  # noqa: E402
from tests.unit import test_simhash_neardup as neardup  # noqa: E402
from udfs.links import ExtractPolicy, extract  # noqa: E402
from udfs.simhash import simhash  # noqa: E402
from udfs.text import detect_language, sniff_meta_charset  # noqa: E402

HEADERS = {"content-type": "text/html"}
DECLARED_LANG_ONLY = ExtractPolicy(detect_language=False)


def load(corpus: str, limit: int) -> list[tuple[str, bytes]]:
    """The first `limit` pages of the corpus, plus its median-size page last."""
    folder = WEBDATA / corpus
    records = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    median = sorted(records, key=lambda record: record["bytes"])[len(records) // 2]
    return [
        (record.get("url") or "http://unknown.example/", gzip.decompress((folder / record["file"]).read_bytes()))
        for record in records[:limit] + [median]
    ]


# CPU time of this process: the machine is shared, and wall time would measure the neighbours.
clock = time.process_time


def ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"median {statistics.median(ordered):.2f} ms, p90 {ordered[int(len(ordered) * 0.9)]:.2f} ms"


def parse_step(url: str, body: bytes) -> int:
    return simhash(extract(url, HEADERS, body).text)


def bench_pipeline(pages: list[tuple[str, bytes]]) -> None:
    for url, body in pages[:20]:  # warm-up: imports, language model, caches
        parse_step(url, body)
    times = []
    for url, body in pages:
        start = clock()
        parse_step(url, body)
        times.append((clock() - start) * 1000)
    print(f"extract+links+simhash over {len(pages)} real pages (CPU time): {ms(times)}")
    url, body = pages[-1]
    reps = []
    for _ in range(30):
        start = clock()
        parse_step(url, body)
        reps.append((clock() - start) * 1000)
    print(f"median-size page ({len(body) / 1000:.0f} KB), 30 runs: {ms(reps)}")
    start = clock()
    for _ in range(30):
        extraction = extract(url, HEADERS, body)
    extract_ms = (clock() - start) / 30 * 1000
    start = clock()
    for _ in range(30):
        simhash(extraction.text)
    simhash_ms = (clock() - start) / 30 * 1000
    print(f"  of which extract {extract_ms:.2f} ms, simhash {simhash_ms:.2f} ms "
          f"({len(extraction.links)} links, {len(extraction.text)} text chars)")


def bench_parsers(pages: list[tuple[str, bytes]]) -> None:
    """lexbor vs lxml on the same work: parse, collect <a>/<area> hrefs with text, drop boilerplate, get text."""
    import lxml.html
    from selectolax.lexbor import LexborHTMLParser

    drop = ("script", "style", "noscript", "nav", "header", "footer", "aside")

    def with_lexbor(html: str) -> None:
        tree = LexborHTMLParser(html, scripting=True)
        [(a.attributes.get("href"), a.text(deep=True)) for a in tree.css("a[href], area[href]")]
        for node in tree.css(", ".join(drop)):
            node.decompose()
        if tree.body is not None:
            tree.body.text(separator=" ")

    def with_lxml(html: str) -> None:
        try:
            doc = lxml.html.document_fromstring(html)
        except ValueError:
            return
        [(a.get("href"), a.text_content()) for a in doc.iter("a", "area") if a.get("href")]
        for node in list(doc.iter(*drop)):
            node.drop_tree()
        " ".join(doc.itertext())

    texts = [body.decode("utf-8", "replace") for _url, body in pages]
    for name, run in (("lexbor", with_lexbor), ("lxml", with_lxml)):
        times = []
        for html in texts:
            start = clock()
            run(html)
            times.append((clock() - start) * 1000)
        print(f"parser {name}: {ms(times)}")


def bench_language(pages: list[tuple[str, bytes]]) -> None:
    declared = agree = 0
    times = []
    for url, body in pages:
        extraction = extract(url, HEADERS, body, DECLARED_LANG_ONLY)
        start = clock()
        guess = detect_language(extraction.text)
        times.append((clock() - start) * 1000)
        if extraction.lang is None:
            continue
        declared += 1
        agree += guess == extraction.lang
    print(f"language: {declared}/{len(pages)} pages declare one; py3langid agrees on {agree}/{declared} "
          f"({agree / max(declared, 1):.1%}); detection {ms(times)}")


def bench_charset(pages: list[tuple[str, bytes]]) -> None:
    detected = 0
    charsets: dict[str, int] = {}
    for url, body in pages:
        extraction = extract(url, HEADERS, body)
        if sniff_meta_charset(body) is None and not body.startswith(codecs.BOM_UTF8):
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                detected += 1
        charsets[extraction.charset or "-"] = charsets.get(extraction.charset or "-", 0) + 1
    top = ", ".join(f"{name} {count}" for name, count in sorted(charsets.items(), key=lambda kv: -kv[1])[:6])
    print(f"charsets (no HTTP header given): {top}; detector used on {detected} pages")


def bench_neardup(stride: int, random_far: int) -> None:
    start = clock()
    pages = neardup.load_pages(stride=stride)
    print(f"near-duplicates: {len(pages)} pages with >= {neardup.MIN_WORDS} words "
          f"(every {stride}th page), words variant changes {neardup.WORD_CHANGE_RATE:.0%} "
          f"(loaded in {clock() - start:.1f} s)")
    for shingle in (1, 2, 3, 4):
        for k in (3, 4):
            result = neardup.score(pages, random_far=random_far, k=k, shingle=shingle)
            print(f"  shingle {shingle} k={k}: precision {result.precision:.4f} recall {result.recall:.4f} "
                  f"(near {result.near}, far {result.far}; missed {result.missed}; false hits {result.false_hits})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=400, help="real pages for the timing figures")
    parser.add_argument("--stride", type=int, default=3, help="every n-th page for precision/recall")
    parser.add_argument("--random-far", type=int, default=3000, help="random different-page pairs")
    args = parser.parse_args()
    pages = load("trafilatura_eval", args.pages)
    bench_pipeline(pages)
    bench_parsers(pages)
    bench_language(pages)
    bench_charset(pages)
    bench_neardup(args.stride, args.random_far)


if __name__ == "__main__":
    main()
