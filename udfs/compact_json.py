"""Compact JSON for state rows and topic values: orjson on the hot path, the standard library otherwise.

Every discovered URL costs the frontier a few row writes and reads, and every batch of links a topic
record each way; the standard library's encoder and decoder would take about a tenth of the frontier's
time (bench/bench_frontier.py, decision 1826). orjson (already installed under PyFlink, with
apache-beam) writes the same JSON in a tenth of the time. Where the two differ, the standard library
decides, so what a row or record says never depends on which one ran:

- values orjson refuses (integers outside 64 bits, lone surrogates, non-string keys) are written by
  `json` instead, escaped to ASCII;
- text orjson refuses (`NaN`/`Infinity`, which older rows may hold, numbers beyond a double, lone
  surrogate escapes, broken JSON) is read by `json`, whose error message callers report.

Two differences stay. A non-finite float is written as `null` (RFC 8259 JSON has no NaN or Infinity;
the standard library wrote tokens other readers reject): rows and records never hold one, their numbers
are checked finite before they are stored. An integer beyond 64 bits reads as a float, as in most JSON
readers (RFC 8259 §6 leaves that range to the reader): every integer of our rows and records fits in
64 bits, and a float where an integer belongs is refused by the same checks (`udfs.urls.is_fp`).
"""
from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> str:
    """`value` as compact JSON text (no spaces; non-ASCII characters as they are)."""
    return dumps_bytes(value).decode("utf-8")


def dumps_bytes(value: Any) -> bytes:
    """`value` as compact JSON in UTF-8: a topic value."""
    try:
        return orjson.dumps(value)
    except TypeError:   # orjson.JSONEncodeError: a value only the standard library writes; escaped to
        # ASCII, so a lone surrogate becomes a `\udXXX` escape rather than bytes that are not UTF-8
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def loads(data: str | bytes | bytearray | memoryview) -> Any:
    """The value of JSON text; raises ValueError (json.JSONDecodeError, or UnicodeDecodeError for bytes
    that are not UTF-8) as `json.loads` does."""
    try:
        return orjson.loads(data)
    except ValueError:  # orjson.JSONDecodeError: let the standard library read it or say what is wrong
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
