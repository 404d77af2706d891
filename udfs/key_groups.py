"""Which subtask of a keyed PyFlink operator a string key reaches, computed the way Flink computes it.

PyFlink's `key_by` keys the stream by a one-field `Row` holding the key (`KeyByKeySelector`), whose
hash is the string's Java `String.hashCode` plus 62 (Flink's hash of an insert row). Flink scrambles
that with a 32-bit murmur finaliser (`MathUtils.murmurHash`), takes it modulo the job's max
parallelism to get the key group, and gives key group g to subtask g × parallelism / max
parallelism (`KeyGroupRangeAssignment`). The fetcher
uses this to tell whether an address it resolved is its own to gate (decision 3907); the unit tests
hold figures that Flink's own `KeyGroupRangeAssignment` printed for the same keys.

Pure: no PyFlink import.
"""
from __future__ import annotations

_MASK = 0xFFFFFFFF
# A one-field insert Row's hash less its field's: Flink's row hash of the kind and the field array.
_ROW_HASH_OFFSET = 62


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` of `text` (over its UTF-16 code units), as a signed 32-bit int."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & _MASK
    return _signed(h)


def murmur_hash(code: int) -> int:
    """Flink's `MathUtils.murmurHash` of a 32-bit int: never negative."""
    h = (code & _MASK) * 0xCC9E2D51 & _MASK
    h = _rotate_left(h, 15) * 0x1B873593 & _MASK
    h = (_rotate_left(h, 13) * 5 + 0xE6546B64) & _MASK
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & _MASK
    h ^= h >> 13
    h = h * 0xC2B2AE35 & _MASK
    h ^= h >> 16
    signed = _signed(h)
    if signed >= 0:
        return signed
    return -signed if signed != -(1 << 31) else 0


def key_group(key: str, max_parallelism: int) -> int:
    """The key group of a string key given to PyFlink's `key_by`."""
    return murmur_hash(_signed((java_string_hash(key) + _ROW_HASH_OFFSET) & _MASK)) % max_parallelism


def subtask_of(key: str, max_parallelism: int, parallelism: int) -> int:
    """The index of the subtask a string key reaches, of `parallelism` subtasks."""
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism {parallelism} must be between 1 and max parallelism {max_parallelism}")
    return key_group(key, max_parallelism) * parallelism // max_parallelism


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value
