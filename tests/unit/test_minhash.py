"""MinHash signatures, LSH banding and the in-memory index (udfs/minhash.py)."""
from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import WEBDATA
from udfs.minhash import (LshIndex, MinHashPolicy, candidate_probability, estimated_jaccard, jaccard, lsh_shape,
                          shingles, signature, signature_of_hashes, words)


def _articles(n: int) -> list[str]:
    truth = json.loads(gzip.open(WEBDATA / "scrapinghub_aeb" / "ground-truth.json.gz").read())
    bodies = [entry["articleBody"] for entry in truth.values() if len(entry["articleBody"].split()) > 300]
    return bodies[:n]


def _edit(text: str, fraction: float, rng: random.Random) -> str:
    tokens = text.split()
    for _ in range(int(len(tokens) * fraction)):
        tokens[rng.randrange(len(tokens))] = rng.choice(["alpha", "beta", "gamma", "delta"])
    return " ".join(tokens)


def test_shingles_are_lowercased_word_kgrams():
    assert shingles("The quick, brown FOX jumps!", 3) == {"the quick brown", "quick brown fox", "brown fox jumps"}


def test_text_shorter_than_a_shingle_is_one_shingle_and_no_words_is_none():
    assert shingles("Hello world", 5) == {"hello world"}
    assert shingles(" ... !!! ", 5) == set()


def test_words_split_unicode_text():
    assert words("Ça coûte 5 €, naïve—façade") == ["ça", "coûte", "5", "naïve", "façade"]


def test_signature_is_deterministic_and_seed_dependent():
    text = "one two three four five six seven eight nine ten"
    assert np.array_equal(signature(text), signature(text))
    assert not np.array_equal(signature(text), signature(text, MinHashPolicy(seed=2)))
    assert signature(text).dtype == np.uint32 and signature(text).shape == (128,)


def test_signature_ignores_shingle_order_and_repeats():
    assert np.array_equal(signature("a b c d e f g h"), signature("a b c d e f g h a b c d e f g h"[:15]))


def test_empty_text_signature_is_all_max():
    assert (signature("") == np.uint32(0xFFFFFFFF)).all()


def test_long_text_is_hashed_in_chunks_like_a_short_one():
    hashes = np.arange(10_000, dtype=np.uint64) * np.uint64(2654435761) % np.uint64(2**32)
    whole = signature_of_hashes(hashes)
    halves = np.minimum(signature_of_hashes(hashes[:5000]), signature_of_hashes(hashes[5000:]))
    assert np.array_equal(whole, halves)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=20, max_size=200), st.lists(st.integers(0, 400), min_size=20,
                                                                           max_size=200))
def test_estimate_is_close_to_the_exact_jaccard(left, right):
    policy = MinHashPolicy(num_perm=256, shingle_size=1)
    a, b = " ".join(f"w{i}" for i in left), " ".join(f"w{i}" for i in right)
    exact = jaccard(shingles(a, 1), shingles(b, 1))
    # 4.5 standard errors of a binomial estimate with 256 trials
    assert abs(estimated_jaccard(signature(a, policy), signature(b, policy)) - exact) <= 4.5 * 0.5 / 16


def test_estimate_tracks_edits_on_real_articles():
    rng = random.Random(7)
    for body in _articles(5):
        edited = _edit(body, 0.02, rng)
        exact = jaccard(shingles(body, 5), shingles(edited, 5))
        assert abs(estimated_jaccard(signature(body), signature(edited)) - exact) < 0.15
        assert estimated_jaccard(signature(body), signature(edited)) >= 0.7


def test_signatures_of_different_lengths_are_not_comparable():
    with pytest.raises(ValueError, match="different lengths"):
        estimated_jaccard(signature("a b c"), signature("a b c", MinHashPolicy(num_perm=64)))


@pytest.mark.parametrize("threshold,num_perm", [(0.5, 128), (0.7, 128), (0.8, 128), (0.9, 256), (0.6, 64)])
def test_banding_puts_the_s_curve_midpoint_near_the_threshold(threshold, num_perm):
    bands, rows = lsh_shape(threshold, num_perm)
    assert bands * rows <= num_perm
    midpoint = (1 / bands) ** (1 / rows)   # MMDS §3.4.3: the S-curve's steepest point
    assert abs(midpoint - threshold) < 0.12
    assert candidate_probability(min(1.0, threshold + 0.2), bands, rows) > 0.9
    assert candidate_probability(max(0.0, threshold - 0.3), bands, rows) < 0.15


def test_a_higher_threshold_gives_longer_bands():
    assert lsh_shape(0.9, 128)[1] > lsh_shape(0.7, 128)[1] > lsh_shape(0.5, 128)[1]


@pytest.mark.parametrize("kwargs,message", [
    ({"shingle_size": 0}, "shingle_size"),
    ({"num_perm": 1}, "num_perm"),
    ({"num_perm": 128.0}, "num_perm"),
    ({"seed": -1}, "seed"),
    ({"threshold": 1.0}, "threshold"),
    ({"threshold": 0}, "threshold"),
    ({"false_positive_weight": 2.0}, "false_positive_weight"),
    ({"false_positive_weight": 0.0, "false_negative_weight": 0.0}, "both be 0"),
])
def test_policy_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MinHashPolicy(**kwargs)


def test_index_finds_near_duplicates_and_not_distinct_articles():
    rng = random.Random(3)
    articles = _articles(12)
    index = LshIndex()
    for i, body in enumerate(articles):
        index.insert(f"doc{i}", signature(body))
    for i, body in enumerate(articles):
        hits = index.near_duplicates(signature(_edit(body, 0.01, rng)))
        assert [key for key, _ in hits] == [f"doc{i}"]
        assert hits[0][1] >= index.policy.threshold


def test_index_candidates_are_verified_against_the_threshold():
    policy = MinHashPolicy(threshold=0.9)
    index = LshIndex(policy)
    base = " ".join(f"w{i}" for i in range(400))
    index.insert("base", signature(base, policy))
    half = " ".join(f"w{i}" for i in range(200)) + " " + " ".join(f"x{i}" for i in range(200))
    assert index.near_duplicates(signature(half, policy)) == []


def test_index_remove_and_duplicate_keys():
    index = LshIndex()
    sig = signature("some text that is long enough to have a few shingles in it")
    index.insert("a", sig)
    with pytest.raises(ValueError, match="already"):
        index.insert("a", sig)
    assert "a" in index and len(index) == 1
    assert index.remove("a") and not index.remove("a")
    assert index.candidates(sig) == set() and len(index) == 0


def test_index_rejects_a_signature_of_another_policy():
    with pytest.raises(ValueError, match="expects"):
        LshIndex().insert("a", signature("a b c", MinHashPolicy(num_perm=64)))
