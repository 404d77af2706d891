"""Throughput of udfs.urls.normalize_url + url_fp against w3lib's canonicalize_url, side by side.

The links are the <a href> values of the real pages in webdata/trafilatura_eval (regex extraction),
resolved against their page URL with urllib first so both sides get the same absolute URLs.
Bounded: at most --limit URLs, --rounds timed passes each (best pass, in CPU time). No network.

    .venv/bin/python -m bench.bench_urls [--limit 100000] [--rounds 3]   (from the project root)
"""
from __future__ import annotations

import argparse
import gzip
import html
import json
import re
import time
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from w3lib.url import canonicalize_url

from tests.paths import WEBDATA
from udfs.urls import DEFAULT_URL_POLICY, _is_clean, normalize_url, url_fp

_HREF = re.compile(rb"""<a\s[^>]*?href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)


def collect_links(limit: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(href, page url) pairs as found, and the absolute http(s) URLs they resolve to."""
    corpus = WEBDATA / "trafilatura_eval"
    pairs: list[tuple[str, str]] = []
    with open(corpus / "manifest.jsonl", encoding="utf-8") as manifest:
        for line in manifest:
            page = json.loads(line)
            body = gzip.open(corpus / page["file"]).read()
            for m in _HREF.finditer(body):
                raw = (m.group(1) or m.group(2) or m.group(3) or b"").decode("utf-8", "replace")
                pairs.append((html.unescape(raw).strip(), page["url"]))
    absolute: list[str] = []
    for href, base in pairs:
        try:
            url = urljoin(base, href)
            urlsplit(url).port  # w3lib raises on a bad port; keep both sides on the same inputs
        except ValueError:
            continue
        if url.startswith(("http://", "https://")):
            absolute.append(url)
    return pairs[:limit], absolute[:limit]


def best_rates(cases: dict[str, tuple[Callable[[object], object], list]], rounds: int) -> dict[str, float]:
    """Items per CPU-second of the fastest pass of each case; passes interleaved, so a noisy
    neighbour on the shared cores hits every case alike, and CPU time ignores time spent descheduled."""
    best = {name: float("inf") for name in cases}
    for _ in range(rounds):
        for name, (fn, items) in cases.items():
            start = time.process_time()
            for item in items:
                fn(item)
            best[name] = min(best[name], time.process_time() - start)
    return {name: len(cases[name][1]) / max(best[name], 1e-9) for name in cases}


def ours(url: str) -> int | None:
    normalized = normalize_url(url)
    return url_fp(normalized) if normalized is not None else None


def w3lib(url: str) -> str | None:
    try:
        return canonicalize_url(url)
    except ValueError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    pairs, urls = collect_links(args.limit)
    kept = sum(1 for u in urls if normalize_url(u) is not None)
    distinct_in, distinct_out = len(set(urls)), len({normalize_url(u) for u in urls} - {None})
    print(f"links: {len(pairs)} hrefs, {len(urls)} absolute http(s) URLs ({distinct_in} distinct)")
    print(f"normalize_url kept {kept} ({100 * kept / max(1, len(urls)):.1f}%), "
          f"{distinct_out} distinct after normalisation")

    clean = [u for u in urls if _is_clean(u, DEFAULT_URL_POLICY)]
    rest = [u for u in urls if not _is_clean(u, DEFAULT_URL_POLICY)]
    rates = best_rates({
        "normalize_url + url_fp": (ours, urls),
        "w3lib canonicalize_url": (w3lib, urls),
        "  of which clean (fast path)": (ours, clean),
        "  of which parsed (ada path)": (ours, rest),
        "normalize_url(href, base) as found": (lambda pair: normalize_url(*pair), pairs),
    }, args.rounds)
    print(f"fast path taken by {len(clean)} of {len(urls)} URLs ({100 * len(clean) / max(1, len(urls)):.1f}%)")
    for name, rate in rates.items():
        print(f"{name:36s} {rate:12,.0f} URLs/s")
    print(f"{'ratio ours / w3lib':36s} {rates['normalize_url + url_fp'] / rates['w3lib canonicalize_url']:12.2f}x")

if __name__ == "__main__":
    main()
