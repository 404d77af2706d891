"""Content dedup decisions: exact duplicates by payload SHA-256, near-duplicates by banded SimHash.

Pure logic behind `operators/dedup.py` (docs/architecture.md §1 "content dedupe"):
- Exact: the first capture of a payload owns it. Its owner row (a plain JSON text with a schema
  version, never a pickled class) names the owner's URL, WARC-Date, WARC payload digest and response
  record id, so later captures of the same payload are written as `revisit` records that refer to it
  (WARC 1.1 §6.7.2). Decision 1300.
- Near: Manku, Jain & Das Sarma, "Detecting near-duplicates for web crawling" (WWW 2007) §3: cut the
  64-bit SimHash into k + 1 blocks; two fingerprints within Hamming distance k agree on at least one
  block (pigeonhole), so one bounded list of fingerprints per (block index, block value) finds every
  candidate; each is confirmed with `hamming`. Decision 1301.
"""
from __future__ import annotations

import dataclasses
import uuid
from typing import TypedDict

from udfs import compact_json
from udfs.simhash import BITS, band_keys, hamming

OWNER_ROW_VERSION = 1
BAND_ROW_VERSION = 1
# Record ids of response records are derived from the fetch, so dedup state can name a record the
# writer has not written yet. A fixed namespace keeps them stable across releases.
_RECORD_NAMESPACE = uuid.UUID("6f1f3c2e-9d3b-5a51-8b8e-3c0a64d0e5a1")
_MAX_HAMMING = 7


@dataclasses.dataclass(frozen=True)
class DedupPolicy:
    """Content dedup (config section `dedup`).

    enabled: add the dedup operators between parse and the WARC writer at all.
    max_hamming: k, the largest Hamming distance between SimHashes still called near-duplicates
        (Manku 2007: k = 3 for 64-bit fingerprints); the fingerprint is cut into k + 1 blocks.
    band_capacity: fingerprints kept per (block index, block value) key; the oldest is evicted.
    min_payload_bytes: payloads shorter than this are never exact-deduplicated: a revisit record
        costs about as many bytes as the payload it replaces.
    owner_ttl_s: seconds an owner row stays authoritative; afterwards the next capture of the
        payload owns it again (a fresh full copy in a newer WARC file). 90 days by default.
    """

    enabled: bool = True
    max_hamming: int = 3
    band_capacity: int = 64
    min_payload_bytes: int = 256
    owner_ttl_s: float = 90 * 86_400.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"dedup.enabled must be true or false, not {self.enabled!r}")
        if not isinstance(self.max_hamming, int) or not 1 <= self.max_hamming <= _MAX_HAMMING:
            raise ValueError(f"dedup.max_hamming must be an integer from 1 to {_MAX_HAMMING}, "
                             f"not {self.max_hamming!r}")
        if not isinstance(self.band_capacity, int) or self.band_capacity < 1:
            raise ValueError(f"dedup.band_capacity must be a positive integer, not {self.band_capacity!r}")
        if not isinstance(self.min_payload_bytes, int) or self.min_payload_bytes < 0:
            raise ValueError(f"dedup.min_payload_bytes must be a non-negative integer, "
                             f"not {self.min_payload_bytes!r}")
        if not self.owner_ttl_s > 0:
            raise ValueError(f"dedup.owner_ttl_s must be positive, not {self.owner_ttl_s!r}")


class RevisitOf(TypedDict):
    """The owner capture an exact duplicate refers to (fields of `udfs.warc.RevisitTarget`)."""

    record_id: str
    target_uri: str
    date: str
    payload_digest: str


class NearMatch(TypedDict):
    """The closest stored fingerprint within k of a page's SimHash."""

    url: str
    url_fp: int
    host: str
    distance: int
    simhash: int


class DedupVerdict(TypedDict):
    """What dedup decided for one page bundle (plain values: it crosses Flink edges)."""

    response_id: str | None        # WARC-Record-ID of the response record, if one is written
    revisit_of: RevisitOf | None   # set: write an identical-payload revisit instead of a response
    duplicate_of: str | None       # the owner's URL when another URL owns the payload
    near: NearMatch | None         # the closest near-duplicate, if any


# --- exact duplicates --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OwnerRow:
    """The capture that owns a payload: enough to write a revisit that refers to it (WARC 1.1 §5.19-5.20)."""

    url: str
    url_fp: int
    warc_date: str          # the owner's WARC-Date exactly as written
    payload_digest: str     # the owner's WARC-Payload-Digest
    record_id: str          # the owner's response WARC-Record-ID
    captured_at: float      # epoch seconds of the fetch, for owner_ttl_s


def response_record_id(url: str, done_at: float, lease_id: str) -> str:
    """The WARC-Record-ID of a fetch's response record, derived from the fetch.

    A name-based UUID (RFC 9562 v5) of URL, fetch time and lease: unique per fetch, and known to
    dedup before the writer builds the record, so owner rows can name it for WARC-Refers-To.
    """
    return f"<urn:uuid:{uuid.uuid5(_RECORD_NAMESPACE, f'{url}|{done_at!r}|{lease_id}')}>"


def exact_candidate(http_status: int | None, fetch_status: str, truncated: str | None, payload_bytes: int,
                    policy: DedupPolicy) -> bool:
    """Whether a capture takes part in exact dedup: a complete, untruncated 200
    response with at least `min_payload_bytes` of payload. A cut payload never owns nor aliases."""
    return (http_status == 200 and fetch_status == "ok" and truncated is None
            and payload_bytes >= policy.min_payload_bytes)


def encode_owner(row: OwnerRow) -> str:
    """The owner row as stored in keyed state: JSON with schema version `v` (docs/architecture.md §3)."""
    return compact_json.dumps({"v": OWNER_ROW_VERSION, "url": row.url, "url_fp": row.url_fp,
                               "warc_date": row.warc_date, "payload_digest": row.payload_digest,
                               "record_id": row.record_id, "captured_at": row.captured_at})


def decode_owner(text: str | None) -> OwnerRow | None:
    """The owner row stored as `text`; None when absent, unreadable or of another schema version
    (the next capture then owns the payload afresh). Never raises."""
    if not text:
        return None
    try:
        raw = compact_json.loads(text)
        if raw.get("v") != OWNER_ROW_VERSION:
            return None
        row = OwnerRow(url=raw["url"], url_fp=raw["url_fp"], warc_date=raw["warc_date"],
                       payload_digest=raw["payload_digest"], record_id=raw["record_id"],
                       captured_at=float(raw["captured_at"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    typed = (isinstance(row.url, str) and isinstance(row.url_fp, int) and isinstance(row.warc_date, str)
             and isinstance(row.payload_digest, str) and isinstance(row.record_id, str))
    return row if typed else None


def decide_exact(stored: OwnerRow | None, capture: OwnerRow, policy: DedupPolicy) -> tuple[DedupVerdict, OwnerRow]:
    """The verdict for `capture` given the payload's stored owner row, and the row to keep.

    No owner (or one older than `owner_ttl_s`): `capture` owns the payload and gets a response record.
    Owner from another URL: a revisit, `duplicate_of` = the owner's URL. Owner with the same URL
    (unchanged content on a refetch): a revisit too, `duplicate_of` None (not an alias). The row
    always keeps the first capture, so every revisit refers to a full response record.
    """
    if stored is None or capture.captured_at - stored.captured_at > policy.owner_ttl_s:
        return DedupVerdict(response_id=capture.record_id, revisit_of=None, duplicate_of=None, near=None), capture
    revisit = RevisitOf(record_id=stored.record_id, target_uri=stored.url, date=stored.warc_date,
                        payload_digest=stored.payload_digest)
    alias = None if stored.url_fp == capture.url_fp else stored.url
    return DedupVerdict(response_id=None, revisit_of=revisit, duplicate_of=alias, near=None), stored


def unique_verdict(response_id: str | None) -> DedupVerdict:
    """The verdict of a page dedup did not match (yet): a plain response record with `response_id`."""
    return DedupVerdict(response_id=response_id, revisit_of=None, duplicate_of=None, near=None)


# --- near duplicates ---------------------------------------------------------------------------

BandEntry = tuple[int, str, int, str]     # (simhash, url, url_fp, host), oldest first in a band


def probe_keys(simhash: int, policy: DedupPolicy) -> list[int]:
    """The k + 1 band keys of a fingerprint, one per block, each encoding (block index, block value)
    as a non-negative 63-bit integer (Manku 2007 §3.1 with the pigeonhole minimum of tables)."""
    return band_keys(simhash, policy.max_hamming)


def encode_band(entries: list[BandEntry]) -> str:
    """A band's entries as stored in keyed state: JSON with schema version `v`, oldest first."""
    return compact_json.dumps({"v": BAND_ROW_VERSION, "e": entries})


def decode_band(text: str | None) -> list[BandEntry]:
    """The entries stored as `text`; [] when absent, unreadable or of another version. Never raises.

    Only `encode_band` writes bands, so entry types are trusted (this runs on every probe)."""
    if not text:
        return []
    try:
        raw = compact_json.loads(text)
        if raw.get("v") != BAND_ROW_VERSION:
            return []
        return [(s, u, f, h) for s, u, f, h in raw["e"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _rank(match: NearMatch, host: str) -> tuple[int, bool, str]:
    # Closest first; on a tie prefer the same host (a site's own copy), then the URL for determinism.
    return match["distance"], match["host"] != host, match["url"]


def closest(entries: list[BandEntry], simhash: int, url_fp: int, host: str, max_hamming: int) -> NearMatch | None:
    """The stored fingerprint nearest to `simhash` within `max_hamming` bits, other than the page's
    own earlier capture (same `url_fp`), or None (Manku 2007 §3: candidates confirmed by distance)."""
    best: NearMatch | None = None
    for other_hash, url, other_fp, other_host in entries:
        if other_fp == url_fp:
            continue
        distance = hamming(simhash, other_hash)
        if distance > max_hamming:
            continue
        match = NearMatch(url=url, url_fp=other_fp, host=other_host, distance=distance, simhash=other_hash)
        if best is None or _rank(match, host) < _rank(best, host):
            best = match
    return best


def better(a: NearMatch | None, b: NearMatch | None, host: str) -> NearMatch | None:
    """The better of two band answers for a page on `host` (the verdict merge across bands)."""
    if a is None or b is None:
        return a or b
    return a if _rank(a, host) <= _rank(b, host) else b


def insert(entries: list[BandEntry], entry: BandEntry, capacity: int) -> tuple[list[BandEntry], int]:
    """`entries` with `entry` appended as the newest (replacing the same URL's older fingerprint) and
    the oldest dropped beyond `capacity`; also how many were evicted (bounded state)."""
    kept = [e for e in entries if e[2] != entry[2]]
    kept.append(entry)
    evicted = max(0, len(kept) - capacity)
    return kept[evicted:], evicted


def metadata_fields(match: NearMatch, simhash: int) -> list[tuple[str, str]]:
    """The `application/warc-fields` of a near-duplicate verdict's WARC metadata record."""
    width = BITS // 4
    return [("near-duplicate-of", match["url"]), ("hamming-distance", str(match["distance"])),
            ("simhash", f"{simhash:0{width}x}"), ("near-duplicate-simhash", f"{match['simhash']:0{width}x}")]
