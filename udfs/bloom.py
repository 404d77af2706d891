"""A Bloom filter over 64-bit URL fingerprints, in front of the frontier's URL table (docs/architecture.md §1
"link dedupe: Bloom filter + authoritative URL records").

Most discovered links are already known (§7: ~90%), but most *new* links are cheaper to reject as
"certainly unseen" in memory than to confirm with a keyed-state read. A "maybe seen" answer is always
confirmed against the URL records, so a false positive costs one state read and never drops a URL;
a false negative cannot happen as long as every URL record is added (the frontier's job).

Sizing follows the textbook optimum (Bloom 1970; Kirsch & Mitzenmacher 2006 for double hashing):
m = -n ln p / (ln 2)^2 bits and k = (m / n) ln 2 probes for n expected URLs at false-positive rate p
(9.6 bits per URL at 1%, §7). The fingerprint is already a uniform 64-bit hash (udfs.urls.url_fp), so
its two halves serve as the two base hashes: no hashing here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class BloomPolicy:
    """The seen-URL filter of one frontier subtask (section `[bloom]`).

    enabled: consult the filter before the URL table (True). Off, every admission reads state.
    expected_urls: URLs one frontier subtask is sized for (2,000,000); more still work, with a rising
        false-positive rate (the `bloom_fill_ratio` gauge shows it; resize and restart to fix).
    false_positive_rate: target rate at `expected_urls` (0.01 = 9.6 bits per URL).
    """

    enabled: bool = True
    expected_urls: int = 2_000_000
    false_positive_rate: float = 0.01

    def __post_init__(self) -> None:
        if not isinstance(self.expected_urls, int) or self.expected_urls < 1:
            raise ValueError(f"bloom.expected_urls must be an integer >= 1, got {self.expected_urls!r}")
        if not (isinstance(self.false_positive_rate, float) and 0.0 < self.false_positive_rate < 0.5):
            raise ValueError(f"bloom.false_positive_rate must be in (0, 0.5), got {self.false_positive_rate!r}")

    @property
    def bits(self) -> int:
        """m, rounded up to whole bytes."""
        m = -self.expected_urls * math.log(self.false_positive_rate) / (math.log(2) ** 2)
        return max(8, int(math.ceil(m / 8.0)) * 8)

    @property
    def probes(self) -> int:
        """k, the number of bit positions per fingerprint."""
        return max(1, round(self.bits / self.expected_urls * math.log(2)))


DEFAULT_BLOOM_POLICY = BloomPolicy()


def _start_and_step(fp: int) -> tuple[int, int]:
    """Double hashing's first position and step for a fingerprint (signed or not: one key)."""
    fp &= _MASK64
    return fp & 0xFFFFFFFF, (fp >> 32) | 1   # an odd step visits k distinct positions for any m


class SeenFilter:
    """The filter itself: `add` a fingerprint, ask `might_contain`; never raises on any int."""

    def __init__(self, policy: BloomPolicy = DEFAULT_BLOOM_POLICY) -> None:
        self.m = policy.bits
        self.k = policy.probes
        self._bits = bytearray(self.m // 8)
        self._set_bits = 0

    def _positions(self, fp: int) -> list[int]:
        h1, h2 = _start_and_step(fp)
        return [(h1 + i * h2) % self.m for i in range(self.k)]

    def add(self, fp: int) -> None:
        bits = self._bits
        for pos in self._positions(fp):
            byte, mask = pos >> 3, 1 << (pos & 7)
            if not bits[byte] & mask:
                bits[byte] |= mask
                self._set_bits += 1

    def might_contain(self, fp: int) -> bool:
        """False: certainly never added. True: added, or a false positive (confirm against state)."""
        # Position by position, stopping at the first clear bit: most URLs the frontier asks about are
        # new, and at a fill well under half one or two probes answer them (admission's hot path).
        bits, m = self._bits, self.m
        pos, step = _start_and_step(fp)   # the positions of _positions, one at a time
        for _ in range(self.k):
            position = pos % m
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
            pos += step
        return True

    @property
    def fill_ratio(self) -> float:
        """Share of bits set; the false-positive rate is about fill_ratio ** k."""
        return self._set_bits / self.m

    @property
    def size_bytes(self) -> int:
        return len(self._bits)
