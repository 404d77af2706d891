"""Corpus-level near-duplicate detection: MinHash signatures over word shingles, and LSH banding.

Pure: values in, values out ("corpus-level near-duplicate removal"). The method is the
textbook one (Broder 1997; Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*, ch. 3):

- a text becomes the *set* of its word k-grams (`shingles`): lower-cased Unicode word runs, joined
  by one space, each hashed to 32 bits with MurmurHash3 (`mmh3`) under the policy's seed;
- its signature holds, for each of `num_perm` hash functions, the minimum over the shingle hashes;
  the functions are multiply-add-shift hashes `((a·x + b) mod 2**64) >> 32` with random odd 64-bit
  `a` and random `b` drawn from the seed (Dietzfelbinger et al. 1997: universal for 32-bit keys,
  and the wrap-around of numpy's uint64 arithmetic *is* the `mod 2**64`);
- the fraction of equal positions in two signatures estimates the Jaccard similarity of the sets;
- LSH splits a signature into `bands` of `rows`; two texts become candidates when one band is
  equal, which happens with probability `1 - (1 - s**rows)**bands` at similarity `s`. The shape is
  chosen from the threshold by minimising the false-positive plus false-negative area under that
  S-curve (`lsh_shape`); candidates are then verified against the threshold on the full signature.

Decision: docs/decisions/1201-minhash-shingles-hashes-and-banding.md.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

import mmh3
import numpy as np
import numpy.typing as npt

Signature = npt.NDArray[np.uint32]

_WORD: Final = re.compile(r"\w+", re.UNICODE)
_MAX_HASH: Final = np.uint32(0xFFFFFFFF)
# Shingle hashes are folded into the permutation matrix this many at a time, so a very long text
# costs (chunk × num_perm) uint64 of memory, not (shingles × num_perm).
_CHUNK: Final = 2048
# The S-curve is integrated on this many points per area (lsh_shape).
_GRID: Final = 512


@dataclass(frozen=True)
class MinHashPolicy:
    """How texts are shingled, hashed and banded (section `[minhash]` of a consumer's settings).

    shingle_size: words per shingle (5): long enough that two unrelated articles share few
        shingles, short enough that one edited word disturbs only 5 of them.
    num_perm: hash functions, i.e. signature length (128); the standard error of the Jaccard
        estimate is about sqrt(s(1-s)/num_perm), 0.035 at s = 0.8.
    seed: seed of the shingle hash and of the hash-function parameters (1). Signatures made with
        different seeds, sizes or lengths are not comparable: a stored index records them.
    threshold: estimated Jaccard similarity at or above which two texts are near-duplicates (0.5;
        chosen on the pairs of bench/bench_minhash.py: page texts keep their boilerplate, so the
        same article on two sites rarely shares more than 60-80% of its shingles).
    false_positive_weight / false_negative_weight: how the banding shape trades candidates below
        the threshold against missed pairs above it (0.5 / 0.5); both in [0, 1], not both 0.
    """

    shingle_size: int = 5
    num_perm: int = 128
    seed: int = 1
    threshold: float = 0.5
    false_positive_weight: float = 0.5
    false_negative_weight: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.shingle_size, int) or not 1 <= self.shingle_size <= 32:
            raise ValueError(f"shingle_size must be an integer in [1, 32] words, got {self.shingle_size!r}")
        if not isinstance(self.num_perm, int) or not 2 <= self.num_perm <= 4096:
            raise ValueError(f"num_perm must be an integer in [2, 4096], got {self.num_perm!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        if not isinstance(self.threshold, (int, float)) or not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be a number strictly between 0 and 1, got {self.threshold!r}")
        for name in ("false_positive_weight", "false_negative_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        if self.false_positive_weight + self.false_negative_weight == 0:
            raise ValueError("false_positive_weight and false_negative_weight must not both be 0")

    @property
    def bands(self) -> int:
        """LSH bands derived from the threshold (see `lsh_shape`)."""
        return lsh_shape(self.threshold, self.num_perm, self.false_positive_weight, self.false_negative_weight)[0]

    @property
    def rows(self) -> int:
        """Signature positions per LSH band (see `lsh_shape`)."""
        return lsh_shape(self.threshold, self.num_perm, self.false_positive_weight, self.false_negative_weight)[1]


DEFAULT_MINHASH_POLICY: Final = MinHashPolicy()


def words(text: str) -> list[str]:
    """The lower-cased Unicode word runs of `text`: the tokens of word shingles (MMDS §3.2.4). Never raises."""
    return _WORD.findall(text.lower())


def shingles(text: str, size: int) -> set[str]:
    """The set of word `size`-grams of `text`, each as its words joined by one space (MMDS §3.2).

    A text shorter than `size` words is one shingle of all its words; a text without words has no
    shingles. Never raises.
    """
    tokens = words(text)
    if not tokens:
        return set()
    if len(tokens) <= size:
        return {" ".join(tokens)}
    return {" ".join(tokens[i:i + size]) for i in range(len(tokens) - size + 1)}


@lru_cache(maxsize=16)
def _parameters(num_perm: int, seed: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2**64, size=num_perm, dtype=np.uint64) | np.uint64(1)   # odd
    b = rng.integers(0, 2**64, size=num_perm, dtype=np.uint64)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def shingle_hashes(items: Iterable[str], seed: int) -> npt.NDArray[np.uint64]:
    """32-bit MurmurHash3 of each shingle under `seed`, as uint64: shingles as integers (MMDS §3.2.3)."""
    return np.fromiter((mmh3.hash(item, seed, signed=False) for item in items), dtype=np.uint64)


def signature_of_hashes(hashes: npt.NDArray[np.uint64], policy: MinHashPolicy = DEFAULT_MINHASH_POLICY) -> Signature:
    """The MinHash signature of a set given by its 32-bit shingle hashes (MMDS §3.3.5).

    Position i is min over x of ((a_i·x + b_i) mod 2**64) >> 32. An empty set gives all 0xFFFFFFFF.
    """
    a, b = _parameters(policy.num_perm, policy.seed)
    signature = np.full(policy.num_perm, _MAX_HASH, dtype=np.uint32)
    with np.errstate(over="ignore"):   # the wrap-around is the mod 2**64
        for start in range(0, len(hashes), _CHUNK):
            chunk = hashes[start:start + _CHUNK, None]
            permuted = ((chunk * a + b) >> np.uint64(32)).astype(np.uint32)
            np.minimum(signature, permuted.min(axis=0), out=signature)
    return signature


def signature(text: str, policy: MinHashPolicy = DEFAULT_MINHASH_POLICY) -> Signature:
    """The MinHash signature of `text`'s word shingles under `policy` (MMDS §3.3). Never raises."""
    return signature_of_hashes(shingle_hashes(shingles(text, policy.shingle_size), policy.seed), policy)


def estimated_jaccard(left: Signature, right: Signature) -> float:
    """The fraction of equal positions: an unbiased estimate of the Jaccard similarity (MMDS §3.3.3).

    Raises ValueError when the signatures differ in length (they come from different policies).
    """
    if left.shape != right.shape:
        raise ValueError(f"signatures of different lengths ({left.shape[0]} and {right.shape[0]}) are not comparable")
    return float(np.count_nonzero(left == right)) / float(left.shape[0])


def jaccard(left: set[str], right: set[str]) -> float:
    """The exact Jaccard similarity |A ∩ B| / |A ∪ B| of two shingle sets (MMDS §3.1.1; 1.0 for two empty sets)."""
    union = len(left | right)
    return len(left & right) / union if union else 1.0


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that two texts of Jaccard `similarity` share at least one band (MMDS §3.4.2)."""
    return 1.0 - (1.0 - similarity ** rows) ** bands


@lru_cache(maxsize=64)
def lsh_shape(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands·rows ≤ num_perm minimising the weighted error areas (MMDS §3.4.3).

    The false-positive area is the candidate probability integrated over similarities below the
    threshold, the false-negative area one minus it integrated above; the pair with the smallest
    `fp_weight·FP + fn_weight·FN` wins (fewer bands on a tie: fewer index entries).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be strictly between 0 and 1, got {threshold!r}")
    if num_perm < 1:
        raise ValueError(f"num_perm must be positive, got {num_perm!r}")
    below = np.linspace(0.0, threshold, _GRID)
    above = np.linspace(threshold, 1.0, _GRID)
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = np.trapezoid(1.0 - (1.0 - below ** rows) ** bands, below)
            fn = np.trapezoid((1.0 - above ** rows) ** bands, above)
            error = fp_weight * float(fp) + fn_weight * float(fn)
            if best is None or error < best[0] - 1e-12:
                best = (error, bands, rows)
    assert best is not None
    return best[1], best[2]


@dataclass(eq=False)   # identity: comparing two indexes field by field means nothing
class LshIndex:
    """An in-memory LSH index of signatures by key (MMDS §3.4.1): insert, query candidates, verify.

    Each band of `rows` positions is a bucket key; a query's candidates are the keys sharing at least
    one bucket, and `near_duplicates` keeps those whose estimated Jaccard reaches the threshold.
    Memory: one signature (4·num_perm bytes) and `bands` bucket entries per key.
    """

    policy: MinHashPolicy = DEFAULT_MINHASH_POLICY
    _signatures: dict[str, Signature] = field(default_factory=dict, init=False, repr=False)
    _buckets: list[dict[bytes, list[str]]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._bands, self._rows = self.policy.bands, self.policy.rows
        self._buckets = [{} for _ in range(self._bands)]

    def __len__(self) -> int:
        return len(self._signatures)

    def __contains__(self, key: object) -> bool:
        return key in self._signatures

    def insert(self, key: str, sig: Signature) -> None:
        """Add `sig` under `key` (MMDS §3.4.1); raises ValueError for a known key or a wrong length."""
        self._check(sig)
        if key in self._signatures:
            raise ValueError(f"key {key!r} is already in the index")
        self._signatures[key] = sig
        for bucket, band in zip(self._buckets, self._bands_of(sig)):
            bucket.setdefault(band, []).append(key)

    def remove(self, key: str) -> bool:
        """Drop `key` and its buckets; False when it was not there."""
        sig = self._signatures.pop(key, None)
        if sig is None:
            return False
        for bucket, band in zip(self._buckets, self._bands_of(sig)):
            keys = bucket[band]
            keys.remove(key)
            if not keys:
                del bucket[band]
        return True

    def candidates(self, sig: Signature) -> set[str]:
        """Keys sharing at least one band with `sig` (MMDS §3.4.1): a superset of likely duplicates."""
        self._check(sig)
        found: set[str] = set()
        for bucket, band in zip(self._buckets, self._bands_of(sig)):
            found.update(bucket.get(band, ()))
        return found

    def near_duplicates(self, sig: Signature) -> list[tuple[str, float]]:
        """Candidates whose estimated Jaccard with `sig` is at least the threshold, most similar first."""
        scored = [(key, estimated_jaccard(sig, self._signatures[key])) for key in self.candidates(sig)]
        return sorted(((k, s) for k, s in scored if s >= self.policy.threshold), key=lambda item: (-item[1], item[0]))

    def items(self) -> Iterator[tuple[str, Signature]]:
        """(key, signature) pairs in insertion order."""
        return iter(self._signatures.items())

    def _bands_of(self, sig: Signature) -> Iterator[bytes]:
        raw = sig.astype("<u4", copy=False).tobytes()
        width = 4 * self._rows
        return (raw[i * width:(i + 1) * width] for i in range(self._bands))

    def _check(self, sig: Signature) -> None:
        if sig.shape != (self.policy.num_perm,):
            raise ValueError(f"signature has shape {sig.shape}, the index expects ({self.policy.num_perm},)")
