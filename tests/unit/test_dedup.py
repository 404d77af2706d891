"""udfs.dedup: the policy, exact-duplicate owner rows and verdicts, and the banded near-duplicate index
(Manku et al. 2007: fingerprints within k share one of k + 1 blocks; farther ones are never reported)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.dedup import (
    BAND_ROW_VERSION,
    OWNER_ROW_VERSION,
    DedupPolicy,
    NearMatch,
    OwnerRow,
    better,
    closest,
    decide_exact,
    decode_band,
    decode_owner,
    encode_band,
    encode_owner,
    exact_candidate,
    insert,
    metadata_fields,
    probe_keys,
    response_record_id,
)
from udfs.simhash import hamming

POLICY = DedupPolicy()
FP64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def owner(url: str = "http://a.test/x", fp: int = 1, at: float = 1_000.0) -> OwnerRow:
    return OwnerRow(url=url, url_fp=fp, warc_date="2026-11-29T12:00:00.000000Z", payload_digest="sha1:ABC",
                    record_id=response_record_id(url, at, "lease"), captured_at=at)


def flip(value: int, bits: list[int]) -> int:
    for bit in bits:
        value ^= 1 << bit
    return value


# --- policy ------------------------------------------------------------------------------------

def test_policy_defaults_are_the_documented_ones() -> None:
    assert (POLICY.enabled, POLICY.max_hamming, POLICY.band_capacity, POLICY.min_payload_bytes,
            POLICY.owner_ttl_s) == (True, 3, 64, 256, 90 * 86_400.0)


@pytest.mark.parametrize("field, value, message", [
    ("enabled", "yes", "dedup.enabled"),
    ("max_hamming", 0, "dedup.max_hamming"),
    ("max_hamming", 8, "dedup.max_hamming"),
    ("max_hamming", 2.5, "dedup.max_hamming"),
    ("band_capacity", 0, "dedup.band_capacity"),
    ("min_payload_bytes", -1, "dedup.min_payload_bytes"),
    ("owner_ttl_s", 0, "dedup.owner_ttl_s"),
])
def test_policy_rejects_bad_values_naming_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DedupPolicy(**{field: value})


# --- exact -------------------------------------------------------------------------------------

@pytest.mark.parametrize("status, fetch_status, truncated, size, expected", [
    (200, "ok", None, 256, True),
    (200, "ok", None, 255, False),          # a revisit would cost as much as the payload
    (200, "too_large", "length", 10_000, False),  # a cut payload never owns nor aliases
    (404, "ok", None, 10_000, False),
    (None, "dns_error", None, 0, False),
])
def test_exact_candidates_are_complete_200_payloads_above_the_minimum(
        status: int | None, fetch_status: str, truncated: str | None, size: int, expected: bool) -> None:
    assert exact_candidate(status, fetch_status, truncated, size, POLICY) is expected


def test_first_capture_owns_the_payload_and_gets_its_derived_record_id() -> None:
    capture = owner()
    verdict, keep = decide_exact(None, capture, POLICY)
    assert keep is capture
    assert verdict == {"response_id": capture.record_id, "revisit_of": None, "duplicate_of": None, "near": None}


def test_another_url_with_the_same_payload_is_an_alias_revisit_of_the_owner() -> None:
    first = owner()
    verdict, keep = decide_exact(first, owner("http://b.test/print/x", fp=2, at=2_000.0), POLICY)
    assert keep is first and verdict["duplicate_of"] == "http://a.test/x" and verdict["response_id"] is None
    assert verdict["revisit_of"] == {"record_id": first.record_id, "target_uri": first.url,
                                     "date": first.warc_date, "payload_digest": first.payload_digest}


def test_the_same_url_unchanged_is_a_revisit_but_not_an_alias() -> None:
    first = owner()
    verdict, keep = decide_exact(first, owner(at=5_000.0), POLICY)
    assert keep is first and verdict["duplicate_of"] is None
    assert verdict["revisit_of"] is not None and verdict["revisit_of"]["record_id"] == first.record_id


def test_an_expired_owner_is_replaced_by_the_next_capture() -> None:
    policy = DedupPolicy(owner_ttl_s=100.0)
    later = owner("http://b.test/y", fp=2, at=1_101.0)
    verdict, keep = decide_exact(owner(at=1_000.0), later, policy)
    assert keep is later and verdict["revisit_of"] is None and verdict["response_id"] == later.record_id


def test_owner_rows_round_trip_with_their_schema_version() -> None:
    row = owner(fp=(1 << 64) - 1)
    text = encode_owner(row)
    assert json.loads(text)["v"] == OWNER_ROW_VERSION
    assert decode_owner(text) == row


@pytest.mark.parametrize("text", [None, "", "not json", "[]", '{"v": 99, "url": "x"}',
                                  '{"v": 1, "url": "x"}', json.dumps({"v": 1, "url": 5, "url_fp": 1,
                                  "warc_date": "d", "payload_digest": "p", "record_id": "r", "captured_at": 1})])
def test_unreadable_owner_rows_read_as_absent(text: str | None) -> None:
    assert decode_owner(text) is None


def test_record_ids_are_stable_per_fetch_and_differ_between_fetches() -> None:
    a = response_record_id("http://a.test/", 1.5, "L1")
    assert a == response_record_id("http://a.test/", 1.5, "L1")
    assert a.startswith("<urn:uuid:") and a.endswith(">")
    assert len({a, response_record_id("http://a.test/", 1.6, "L1"), response_record_id("http://a.test/", 1.5, "L2"),
                response_record_id("http://b.test/", 1.5, "L1")}) == 4


# --- near: bands -------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_a_fingerprint_has_k_plus_one_band_keys_one_per_block(k: int) -> None:
    keys = probe_keys(0x0123456789ABCDEF, DedupPolicy(max_hamming=k))
    assert len(keys) == len(set(keys)) == k + 1
    assert all(0 <= key < 1 << 63 for key in keys)


@settings(max_examples=300, deadline=None)
@given(fp=FP64, bits=st.lists(st.integers(0, 63), max_size=3, unique=True), k=st.integers(1, 3))
def test_fingerprints_within_k_always_share_a_band_key(fp: int, bits: list[int], k: int) -> None:
    other = flip(fp, bits[:k])
    policy = DedupPolicy(max_hamming=k)
    assert set(probe_keys(fp, policy)) & set(probe_keys(other, policy))


@settings(max_examples=300, deadline=None)
@given(fp=FP64, others=st.lists(FP64, max_size=20), k=st.integers(1, 4))
def test_farther_fingerprints_are_never_reported_and_nearer_ones_always_are(
        fp: int, others: list[int], k: int) -> None:
    entries = [(o, f"http://h.test/{i}", 100 + i, "h.test") for i, o in enumerate(others)]
    match = closest(entries, fp, 1, "h.test", k)
    distances = [hamming(fp, o) for o in others]
    if match is None:
        assert all(d > k for d in distances)
    else:
        assert match["distance"] == min(distances) <= k
        assert hamming(fp, match["simhash"]) == match["distance"]


def test_the_page_s_own_earlier_fingerprint_is_not_its_near_duplicate() -> None:
    assert closest([(7, "http://h.test/a", 5, "h.test")], 7, 5, "h.test", 3) is None


def test_ties_prefer_the_same_host_then_the_url() -> None:
    entries = [(0b1, "http://z.test/a", 2, "z.test"), (0b10, "http://h.test/b", 3, "h.test"),
               (0b100, "http://h.test/a", 4, "h.test")]
    match = closest(entries, 0, 1, "h.test", 3)
    assert match is not None and match["url"] == "http://h.test/a"


def test_the_verdict_merge_keeps_the_closest_answer_of_all_bands() -> None:
    near = NearMatch(url="http://h.test/near", url_fp=2, host="h.test", distance=1, simhash=1)
    far = NearMatch(url="http://h.test/far", url_fp=3, host="h.test", distance=3, simhash=7)
    assert better(None, None, "h.test") is None
    assert better(far, None, "h.test") is far and better(None, near, "h.test") is near
    assert better(far, near, "h.test") is near and better(near, far, "h.test") is near


def test_bands_keep_the_newest_entries_up_to_capacity_and_count_evictions() -> None:
    entries: list = []
    evictions = 0
    for i in range(5):
        entries, evicted = insert(entries, (i, f"http://h.test/{i}", i, "h.test"), capacity=3)
        evictions += evicted
    assert [e[2] for e in entries] == [2, 3, 4] and evictions == 2


def test_a_refetched_url_replaces_its_entry_instead_of_adding_one() -> None:
    entries, _ = insert([(1, "http://h.test/a", 9, "h.test"), (2, "http://h.test/b", 8, "h.test")],
                        (3, "http://h.test/a", 9, "h.test"), capacity=3)
    assert entries == [(2, "http://h.test/b", 8, "h.test"), (3, "http://h.test/a", 9, "h.test")]


def test_band_rows_round_trip_with_their_schema_version() -> None:
    entries = [((1 << 64) - 1, "http://h.test/ü", (1 << 64) - 2, "h.test"), (0, "http://g.test/", 0, "g.test")]
    text = encode_band(entries)
    assert json.loads(text)["v"] == BAND_ROW_VERSION
    assert decode_band(text) == entries


@pytest.mark.parametrize("text", [None, "", "{", "[]", '{"v": 2, "e": []}', '{"v": 1, "e": [[1, 2]]}',
                                  '{"v": 1}'])
def test_unreadable_band_rows_read_as_empty(text: str | None) -> None:
    assert decode_band(text) == []


def test_metadata_fields_name_the_verdict_distance_and_both_fingerprints() -> None:
    match = NearMatch(url="http://h.test/a", url_fp=2, host="h.test", distance=2, simhash=0xF)
    assert metadata_fields(match, 0xF0) == [
        ("near-duplicate-of", "http://h.test/a"), ("hamming-distance", "2"),
        ("simhash", "00000000000000f0"), ("near-duplicate-simhash", "000000000000000f")]
