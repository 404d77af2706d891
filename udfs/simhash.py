"""64-bit SimHash fingerprints of page text and the band keys of a Manku-style near-duplicate index.

SimHash (Charikar 2002) over word shingles; near-duplicates are fingerprints within Hamming
distance k (Manku, Jain & Das Sarma, "Detecting near-duplicates for web crawling", WWW 2007,
k = 3 for 64-bit fingerprints). `band_keys` implements the paper's table design: cut the 64 bits
into `blocks` pieces; two fingerprints that differ in at most k bits agree exactly on at least
`blocks - k` pieces (pigeonhole), so indexing every choice of `blocks - k` pieces finds every pair.

Fingerprints live in Flink state and on topics: the algorithm (tokeniser, hash, seed, shingle
size) is part of the data contract and is pinned by a golden test.
"""
from __future__ import annotations

import itertools
import re
from collections import Counter
from functools import lru_cache

import mmh3
import numpy as np

BITS = 64
# Word unigrams weighted by their count: chosen by the precision/recall measurement in
# bench/bench_extract.py (docs/decisions/0302); longer shingles lose recall at k = 3.
SHINGLE_WORDS = 1
_SEED = 0x5EED
_MASK = (1 << BITS) - 1
# Words: runs of letters/digits; punctuation and markup leftovers are separators.
_WORD = re.compile(r"\w+")
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd: the rolling combination is a bijection per step


def tokens(text: str) -> list[str]:
    """The features SimHash sees (Manku 2007 §2: tokenised, case-folded): lower-cased runs of word characters."""
    return _WORD.findall(text.lower())


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele et al. 2014): spreads every input bit over all 64 output bits."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def simhash(text: str, shingle: int = SHINGLE_WORDS) -> int:
    """64-bit SimHash of `text` over overlapping `shingle`-word shingles (Charikar 2002; Manku 2007 §2).

    Each shingle is hashed to 64 bits; bit i of the fingerprint is 1 when more shingles have bit i
    set than clear. Text with fewer words than `shingle` is one shingle; empty text gives 0.
    """
    if shingle < 1:
        raise ValueError(f"shingle must be at least 1 word, got {shingle}")
    words = tokens(text)
    if not words:
        return 0
    if shingle == 1:
        return _weighted_unigrams(words)
    cache: dict[str, int] = {}
    hashes = np.fromiter(
        (cache[w] if w in cache else cache.setdefault(w, mmh3.hash64(w, _SEED, signed=False)[0]) for w in words),
        dtype="<u8",
        count=len(words),
    )
    width = min(shingle, len(words))
    count = len(words) - width + 1
    acc = hashes[:count].copy()
    with np.errstate(over="ignore"):
        for offset in range(1, width):
            acc = acc * _MULT + hashes[offset:offset + count]
        acc = _mix(acc)
    return _majority(acc, np.ones(count, dtype=np.int64), count)


def _weighted_unigrams(words: list[str]) -> int:
    """The one-word-shingle fingerprint from each distinct word once, weighted by its count: the same
    bits as one row per occurrence (a word's hash is the same each time), with a hash and a row per
    distinct word only (about 40% of a page's words)."""
    counts = Counter(words)
    hashes = np.fromiter((mmh3.hash64(w, _SEED, signed=False)[0] for w in counts), dtype="<u8", count=len(counts))
    with np.errstate(over="ignore"):
        mixed = _mix(hashes)
    return _majority(mixed, np.fromiter(counts.values(), dtype=np.int64, count=len(counts)), len(words))


def _majority(hashes: np.ndarray, weights: np.ndarray, total: int) -> int:
    """Bit i is 1 when the weighted count of hashes with bit i set is more than half of `total`."""
    bits = np.unpackbits(hashes.astype("<u8").view(np.uint8), bitorder="little").reshape(len(hashes), BITS)
    majority = (weights @ bits) * 2 > total
    return int(np.packbits(majority, bitorder="little").view("<u8")[0])


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints (Manku 2007 §3)."""
    return ((a ^ b) & _MASK).bit_count()


# Keys are non-negative and below 2**63, so they fit a Flink LONG / Kafka key as they are:
# the top bits name the combination of blocks, the low bits carry those blocks' bits.
_VALUE_BITS = 56
_MAX_COMBINATIONS = 1 << (63 - _VALUE_BITS)


@lru_cache(maxsize=64)
def _layout(k: int, blocks: int) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, ...], ...]]:
    """Block (shift, width) pairs and the block-index combinations that form keys."""
    if not 1 <= k < BITS:
        raise ValueError(f"k must be between 1 and {BITS - 1} bits, got {k}")
    if not k < blocks <= BITS:
        raise ValueError(f"blocks must be more than k={k} and at most {BITS}, got {blocks}")
    base, extra = divmod(BITS, blocks)
    widths = [base + 1 if i < extra else base for i in range(blocks)]
    shifts = [sum(widths[:i]) for i in range(blocks)]
    combos = tuple(itertools.combinations(range(blocks), blocks - k))
    if len(combos) > _MAX_COMBINATIONS:
        raise ValueError(f"{blocks} blocks at k={k} need {len(combos)} keys; at most {_MAX_COMBINATIONS} are supported")
    if max(sum(widths[i] for i in c) for c in combos) > _VALUE_BITS:
        raise ValueError(f"{blocks} blocks at k={k} leave keys wider than {_VALUE_BITS} bits; use more blocks")
    return tuple(zip(shifts, widths)), combos


def band_keys(fp: int, k: int = 3, blocks: int | None = None) -> list[int]:
    """Index keys of `fp` for near-duplicate lookup at Hamming distance ≤ k (Manku 2007 §3.1).

    With `blocks` pieces (default k + 1, the pigeonhole minimum), every pair of fingerprints within
    distance k shares at least one key. More blocks give more keys but narrower buckets (more key
    bits). Candidates that share a key must still be confirmed with `hamming`.
    """
    pieces, combos = _layout(k, k + 1 if blocks is None else blocks)
    fp &= _MASK
    values = [(fp >> shift) & ((1 << width) - 1) for shift, width in pieces]
    keys = []
    for index, combo in enumerate(combos):
        value = 0
        for block in combo:
            value = (value << pieces[block][1]) | values[block]
        keys.append((index << _VALUE_BITS) | value)
    return keys
