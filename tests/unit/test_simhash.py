"""SimHash fingerprints, Hamming distance and Manku band keys."""
from __future__ import annotations

import itertools

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.simhash import _SEED, band_keys, hamming, simhash, tokens

FP = st.integers(min_value=0, max_value=(1 << 64) - 1)


def flip(fp: int, positions: list[int]) -> int:
    for position in positions:
        fp ^= 1 << position
    return fp


# The fingerprint is part of the data contract (it lives in state and on topics): pin it.
@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("The quick brown fox jumps over the lazy dog", 0x53E0A67F09E72A60),
])
def test_simhash_golden_values(text: str, expected: int) -> None:
    assert simhash(text) == expected


def _splitmix_finaliser(x: int) -> int:
    mask = (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def _one_vote_per_occurrence(text: str) -> int:
    """The definition for one-word shingles, without numpy: every occurrence of a word votes."""
    words = tokens(text)
    votes = [0] * 64
    for word in words:
        h = _splitmix_finaliser(mmh3.hash64(word, _SEED, signed=False)[0])
        for bit in range(64):
            votes[bit] += (h >> bit) & 1
    return sum(1 << bit for bit in range(64) if votes[bit] * 2 > len(words))


@settings(max_examples=200)
@given(st.lists(st.sampled_from(["the", "a", "crawler", "Ünïcödé", "東京", "x1", "word_two", "ß"]), max_size=60))
def test_counting_each_distinct_word_once_gives_the_per_occurrence_fingerprint(words: list[str]) -> None:
    text = " ".join(words)
    assert simhash(text) == _one_vote_per_occurrence(text)


def test_simhash_is_64_bit_and_deterministic() -> None:
    text = "near duplicate detection for web crawling " * 20
    assert simhash(text) == simhash(text) and 0 <= simhash(text) < 1 << 64


def test_simhash_ignores_case_punctuation_and_spacing() -> None:
    assert simhash("Hello, World!  Again") == simhash("hello world\nagain")


def test_simhash_of_text_shorter_than_a_shingle_is_one_shingle() -> None:
    assert simhash("one", shingle=3) != 0 and simhash("one two", shingle=3) == simhash("one two", shingle=2)


def test_simhash_rejects_a_shingle_below_one() -> None:
    with pytest.raises(ValueError, match="shingle"):
        simhash("text", shingle=0)


def test_small_edit_stays_close_and_other_text_is_far() -> None:
    base = " ".join(f"word{i % 97} item{i % 13}" for i in range(600))
    edited = base.replace("word5 ", "changed ", 2)
    other = " ".join(f"term{i % 89} thing{i % 7}" for i in range(600))
    assert hamming(simhash(base), simhash(edited)) <= 3
    assert hamming(simhash(base), simhash(other)) > 10


def test_tokens_are_lower_cased_unicode_words() -> None:
    assert tokens("Ünïcode-Wörter, 42 mal!") == ["ünïcode", "wörter", "42", "mal"]


@settings(max_examples=300)
@given(a=FP, b=FP)
def test_hamming_is_symmetric_and_a_metric(a: int, b: int) -> None:
    assert hamming(a, b) == hamming(b, a)
    assert (hamming(a, b) == 0) == (a == b)
    assert 0 <= hamming(a, b) <= 64


@settings(max_examples=300)
@given(a=FP, b=FP, c=FP)
def test_hamming_triangle_inequality(a: int, b: int, c: int) -> None:
    assert hamming(a, c) <= hamming(a, b) + hamming(b, c)


@settings(max_examples=300)
@given(fp=FP, k=st.integers(1, 6), data=st.data())
def test_fingerprints_within_k_share_a_band_key(fp: int, k: int, data: st.DataObject) -> None:
    positions = data.draw(st.lists(st.integers(0, 63), max_size=k, unique=True))
    other = flip(fp, positions)
    assert set(band_keys(fp, k)) & set(band_keys(other, k))


@settings(max_examples=200)
@given(fp=FP, data=st.data())
def test_more_blocks_still_find_every_pair_within_k(fp: int, data: st.DataObject) -> None:
    positions = data.draw(st.lists(st.integers(0, 63), max_size=3, unique=True))
    assert set(band_keys(fp, 3, blocks=6)) & set(band_keys(flip(fp, positions), 3, blocks=6))


def test_band_keys_shape_default_and_with_more_blocks() -> None:
    assert len(band_keys(12345)) == 4  # k + 1 blocks
    assert len(band_keys(12345, 3, blocks=6)) == 20  # C(6, 3) combinations of matching blocks
    for key in itertools.chain(band_keys((1 << 64) - 1), band_keys((1 << 64) - 1, 3, blocks=6)):
        assert 0 <= key < 1 << 63  # fits a Flink LONG


def test_band_keys_separate_blocks_by_position() -> None:
    # The same 16-bit value in different blocks must give different keys.
    assert band_keys(0xABCD)[0] != band_keys(0xABCD << 16)[1]
    assert band_keys(0xABCD)[0] & 0xFFFF == band_keys(0xABCD << 16)[1] & 0xFFFF


def test_fingerprints_far_apart_can_have_no_key_in_common() -> None:
    assert not set(band_keys(0)) & set(band_keys(0x0001_0001_0001_0001))


@pytest.mark.parametrize(("k", "blocks", "message"), [
    (0, None, "k must be"),
    (64, None, "k must be"),
    (3, 3, "blocks must be"),
    (4, 12, "need 495 keys"),
    (1, 10, "wider than"),
])
def test_band_keys_reject_layouts_that_break_the_key_format(k: int, blocks: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        band_keys(1, k, blocks)
