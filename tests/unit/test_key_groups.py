"""udfs.key_groups against figures Flink 2.2's own `KeyGroupRangeAssignment` printed for the keys
PyFlink's `key_by` makes (a one-field Row from `KeyByKeySelector`), at max parallelism 128 and 32768."""
from __future__ import annotations

import pytest

from udfs.key_groups import java_string_hash, key_group, murmur_hash, subtask_of

# key, its Java String.hashCode, key group at 128, subtask of 2 and of 3 at 128, subtask of 4 at 32768
FLINK_FIGURES = [
    ("ip:127.0.0.1", -28156182, 79, 1, 1, 0),
    ("ip:127.0.0.2", -28156181, 27, 0, 0, 0),
    ("ip:127.1.2.3", -27230737, 44, 0, 1, 1),
    ("host:fast.test", 1840194450, 52, 0, 1, 0),
    ("ip:::1", -1183686626, 97, 1, 2, 0),
    ("", 0, 33, 0, 0, 2),
    ("héllo-ünïcode", 760239787, 102, 1, 2, 3),
    ("ip:10.0.0.1", -1477599335, 31, 0, 0, 1),
    ("a😀b", 57849694, 91, 1, 2, 3),   # a character outside the BMP hashes as its two UTF-16 units
]


@pytest.mark.parametrize(("key", "java_hash", "group", "of_two", "of_three", "of_four_wide"), FLINK_FIGURES)
def test_a_key_reaches_the_subtask_flink_gives_it(key: str, java_hash: int, group: int, of_two: int,
                                                  of_three: int, of_four_wide: int) -> None:
    assert java_string_hash(key) == java_hash
    assert key_group(key, 128) == group
    assert (subtask_of(key, 128, 2), subtask_of(key, 128, 3), subtask_of(key, 32768, 4)) == (of_two, of_three,
                                                                                             of_four_wide)


def test_one_subtask_owns_every_key() -> None:
    assert {subtask_of(f"ip:127.0.0.{i}", 128, 1) for i in range(256)} == {0}


def test_the_murmur_hash_is_never_negative() -> None:
    assert min(murmur_hash(code) for code in range(-(1 << 31), (1 << 31) - 1, 9_999_991)) >= 0


@pytest.mark.parametrize("parallelism", [0, 129])
def test_a_parallelism_outside_the_max_is_refused(parallelism: int) -> None:
    with pytest.raises(ValueError, match="between 1 and max parallelism 128"):
        subtask_of("ip:127.0.0.1", 128, parallelism)
