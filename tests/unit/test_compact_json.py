"""udfs.compact_json writes and reads what the standard library does, faster, and fails the same way."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs import compact_json

# Integers within 64 bits: beyond, orjson reads a float (test_integers_beyond_64_bits_...).
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(value=_json_values)
def test_a_written_value_reads_back_as_the_standard_library_reads_it(value: object) -> None:
    text = compact_json.dumps(value)
    assert compact_json.loads(text) == json.loads(text) == value
    assert compact_json.loads(compact_json.dumps_bytes(value)) == value


def test_output_is_compact_and_keeps_non_ascii_characters() -> None:
    assert compact_json.dumps({"a": [1, 2.5, None], "b": "é"}) == '{"a":[1,2.5,null],"b":"é"}'
    assert compact_json.dumps_bytes({"b": "é"}) == '{"b":"é"}'.encode()


@pytest.mark.parametrize("value", [2**64 + 1, -(2**63) - 1, "\ud800", {1: "non-string key"}])
def test_values_orjson_refuses_are_written_by_the_standard_library(value: object) -> None:
    assert compact_json.dumps(value) == json.dumps(value, separators=(",", ":"))
    compact_json.dumps_bytes(value).decode("ascii")   # escaped: always valid UTF-8


def test_integers_beyond_64_bits_read_as_floats_which_fingerprint_checks_refuse() -> None:
    from udfs.urls import is_fp
    value = compact_json.loads(str(2**64 + 1))
    assert isinstance(value, float) and not is_fp(value)
    assert compact_json.loads(str(2**64 - 1)) == 2**64 - 1 and is_fp(compact_json.loads(str(2**64 - 1)))


def test_rows_older_writers_left_read_as_before() -> None:
    assert math.isnan(compact_json.loads("NaN"))
    assert compact_json.loads('{"at": Infinity}') == {"at": math.inf}
    assert compact_json.loads('"\\ud800"') == "\ud800"
    assert compact_json.loads('{"v": 5, "queues": [[0, 1]]}') == {"v": 5, "queues": [[0, 1]]}


def test_non_finite_floats_are_written_as_null() -> None:
    assert compact_json.dumps([math.nan, math.inf]) == "[null,null]"


@pytest.mark.parametrize("text", ["", "[1,", "{'a': 1}", "nul", b"\xff\xfe"])
def test_broken_json_raises_the_standard_librarys_error(text: str | bytes) -> None:
    with pytest.raises(ValueError) as ours:
        compact_json.loads(text)
    with pytest.raises(ValueError) as theirs:
        json.loads(text)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
