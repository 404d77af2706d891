"""Precision and recall of the corpus near-duplicate filter (MinHash + LSH + verification) per threshold.

Usage: .venv/bin/python -m bench.bench_minhash [--negatives 3000]   (from the project root)
Data: ../shared/webdata/scrapinghub_aeb: 181 real news pages with their true article bodies. No
ready-made near-duplicate pairs exist there, so pairs are built (seeded, reproducible):

positives, "the same article from another site":
- syndicated: the article in the boilerplate of two other sites' pages, 1% of words edited;
- page-vs-copy: the crawled page's own text (its real boilerplate) vs the article in another site's;
- edited: the article vs itself with 3% of its words replaced;
- trimmed: the article vs its first 85% ("read more" truncation).
negatives, "different articles":
- random: two different articles;
- same-site: the crawled texts of two different pages of one host (shared boilerplate);
- same-frame: two different articles in the same site's boilerplate.
Each pair's left text goes into one LshIndex (the consumer's code path); the right text is queried
and the pair counts as detected when its left text is among the verified near-duplicates. Prints a
markdown table (also `markdown()`), and the signature throughput. Bounded loops, no network.
"""
from __future__ import annotations

import argparse
import gzip
import itertools
import json
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

from tests.paths import WEBDATA
from udfs.links import extract
from udfs.minhash import LshIndex, MinHashPolicy, signature
from udfs.urls import host_key, normalize_url

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
MIN_ARTICLE_WORDS = 150
FRAME_WORDS = 60          # words of a page's text taken as its header and as its footer


@dataclass(frozen=True)
class Pair:
    kind: str
    positive: bool
    left: str
    right: str


@dataclass(frozen=True)
class Page:
    host: str
    text: str          # as the crawl extracts it: boilerplate + article
    article: str       # the true article body


def load_pages() -> list[Page]:
    truth = json.loads(gzip.open(WEBDATA / "scrapinghub_aeb" / "ground-truth.json.gz").read())
    pages = []
    for line in (WEBDATA / "scrapinghub_aeb" / "manifest.jsonl").open():
        entry = json.loads(line)
        article = truth[entry["id"]]["articleBody"]
        url = normalize_url(entry["url"])
        if url is None or len(article.split()) < MIN_ARTICLE_WORDS:
            continue
        body = gzip.open(WEBDATA / "scrapinghub_aeb" / entry["file"]).read()
        found = extract(url, [("Content-Type", "text/html")], body)
        pages.append(Page(host_key(url), found.text, article))
    return pages


def frame(page: Page, article: str) -> str:
    """`article` inside `page`'s boilerplate: its first and last FRAME_WORDS words of crawled text."""
    words = page.text.split()
    return " ".join(words[:FRAME_WORDS] + article.split() + words[-FRAME_WORDS:])


def edited(text: str, rate: float, rng: random.Random) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), max(1, int(len(words) * rate))):
        words[i] = rng.choice(("update", "reported", "said", "today", "officials", "new"))
    return " ".join(words)


def build_pairs(pages: list[Page], negatives: int, seed: int = 5) -> list[Pair]:
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for i, page in enumerate(pages):
        x, y = rng.sample([j for j in range(len(pages)) if pages[j].host != page.host], 2)
        pairs.append(Pair("syndicated", True, frame(pages[x], edited(page.article, 0.01, rng)),
                          frame(pages[y], edited(page.article, 0.01, rng))))
        pairs.append(Pair("page-vs-copy", True, page.text, frame(pages[y], page.article)))
        pairs.append(Pair("edited", True, page.article, edited(page.article, 0.03, rng)))
        words = page.article.split()
        pairs.append(Pair("trimmed", True, page.article, " ".join(words[:int(len(words) * 0.85)])))
    for _ in range(negatives):
        a, b = rng.sample(range(len(pages)), 2)
        pairs.append(Pair("random", False, pages[a].article, pages[b].article))
    by_host = defaultdict(list)
    for page in pages:
        by_host[page.host].append(page)
    for same in by_host.values():
        for a, b in itertools.combinations(same, 2):
            # pages the corpus keeps only: an empty text never reaches the near-duplicate filter
            if a.article != b.article and min(len(a.text), len(b.text)) >= 200:
                pairs.append(Pair("same-site", False, a.text, b.text))
    for i, page in enumerate(pages):
        other = pages[(i + 1) % len(pages)]
        pairs.append(Pair("same-frame", False, frame(pages[(i + 2) % len(pages)], page.article),
                          frame(pages[(i + 2) % len(pages)], other.article)))
    return pairs


@lru_cache(maxsize=1)
def pages() -> tuple[Page, ...]:
    return tuple(load_pages())


@lru_cache(maxsize=4)
def scored(negatives: int, shingle_size: int) -> tuple[list[Pair], dict[float, list[bool]], float, int]:
    """Pairs, detection per threshold, and signature throughput (signatures/s, count)."""
    pairs = build_pairs(list(pages()), negatives)
    policy = MinHashPolicy(shingle_size=shingle_size)
    start = time.process_time()
    lefts = [signature(p.left, policy) for p in pairs]
    rights = [signature(p.right, policy) for p in pairs]
    rate = 2 * len(pairs) / max(time.process_time() - start, 1e-9)
    detected: dict[float, list[bool]] = {}
    for threshold in THRESHOLDS:
        index = LshIndex(MinHashPolicy(shingle_size=shingle_size, threshold=threshold))
        for n, sig in enumerate(lefts):
            index.insert(str(n), sig)
        detected[threshold] = [str(n) in {key for key, _ in index.near_duplicates(sig)} for n, sig in enumerate(rights)]
    return pairs, detected, rate, 2 * len(pairs)


def markdown(negatives: int = 3000, shingle_size: int = MinHashPolicy().shingle_size) -> str:
    """The precision/recall table of the near-duplicate filter per threshold, as markdown."""
    pairs, detected, rate, count = scored(negatives, shingle_size)
    kinds = Counter(p.kind for p in pairs)
    positive_kinds = [k for k in kinds if any(p.kind == k and p.positive for p in pairs)]
    negative_kinds = [k for k in kinds if k not in positive_kinds]
    head = ["threshold", "bands×rows", "precision", "recall", "TP", "FP", "FN"]
    head += [f"recall {k}" for k in positive_kinds] + [f"false hits {k}" for k in negative_kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for threshold in THRESHOLDS:
        hits = detected[threshold]
        tp = sum(1 for p, h in zip(pairs, hits) if h and p.positive)
        fp = sum(1 for p, h in zip(pairs, hits) if h and not p.positive)
        fn = sum(1 for p, h in zip(pairs, hits) if not h and p.positive)
        policy = MinHashPolicy(threshold=threshold)
        cells = [f"{threshold:.1f}", f"{policy.bands}×{policy.rows}", f"{tp / max(tp + fp, 1):.3f}",
                 f"{tp / max(tp + fn, 1):.3f}", str(tp), str(fp), str(fn)]
        for kind in positive_kinds:
            got = [h for p, h in zip(pairs, hits) if p.kind == kind]
            cells.append(f"{sum(got) / len(got):.3f}")
        for kind in negative_kinds:
            got = [h for p, h in zip(pairs, hits) if p.kind == kind]
            cells.append(f"{sum(got)}/{len(got)}")
        lines.append("| " + " | ".join(cells) + " |")
    pairs_line = ", ".join(f"{k} {n}" for k, n in kinds.items())
    lines += ["", f"Pairs: {pairs_line}. Signatures: "
                  f"{rate:,.0f}/s CPU over {count} texts."]
    lines[0:0] = [f"Shingles of {shingle_size} words, 128 permutations.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--negatives", type=int, default=3000, help="random different-article pairs")
    parser.add_argument("--shingle-size", type=int, action="append", help="words per shingle (repeatable; "
                        "default: the policy's)")
    args = parser.parse_args()
    print("\n\n".join(markdown(args.negatives, size) for size in args.shingle_size or [MinHashPolicy().shingle_size]))


if __name__ == "__main__":
    main()
