"""Distinct pages linking to a URL, counted in 32 bits of its URL record (decision 1819).

Counting in-links exactly needs the set of linking pages, and even a count would cost a URL-table
write for every rediscovered link, most of the links a page carries. Instead each URL keeps a
linear-counting sketch (Whang, Vander-Zanden and Taylor, 1990): a linking page sets one of 32 bits,
chosen by its own fingerprint, so the same page linking again sets the same bit and the record is
written only when a bit flips, at most 32 times in the URL's life. The number of distinct linking
pages is estimated from the share of bits still clear.

Pure functions, no I/O.
"""
from __future__ import annotations

import math

from udfs.urls import is_fp

SKETCH_BITS = 32
_SHIFT = 64 - 5   # the top 5 bits of a 64-bit url_fp pick one of the 32


def linked_from(bits: int, from_fp: object, fp: int) -> int:
    """The sketch `bits` of URL `fp` after page `from_fp` linked to it; unchanged for a page linking to
    itself or an unreadable `from_fp` (older writers send none)."""
    if not is_fp(from_fp) or from_fp == fp:
        return bits
    return bits | 1 << (from_fp >> _SHIFT)


def inlink_estimate(bits: int) -> float:
    """Distinct pages estimated to link here: m·ln(m / clear bits), m = 32; when every bit is set,
    the estimate at one clear bit (m·ln m ≈ 111), the most 32 bits can tell."""
    if not isinstance(bits, int) or bits <= 0:
        return 0.0
    clear = SKETCH_BITS - (bits & (1 << SKETCH_BITS) - 1).bit_count()
    return SKETCH_BITS * math.log(SKETCH_BITS / max(clear, 1))
