"""The pages.parsed contract as the consumers read it: every field they use, with its type and range.

`read_page` turns one Kafka value into a page dict, or raises BadRecord saying why it cannot be
handled: a reason code, the field, and a detail. A page that passes can be written by both consumers
(a Parquet row of consumers.corpus, a row of the SQLite index of consumers.search) without an error,
so a record that would fail there fails here, once, and goes to the dead-letter file
(consumers/deadletter.py, decision 3740) instead of stopping the consumer on every retry.

The checks follow schemas/pages.parsed.v1.json and add what the outputs need: `fetched_at` a finite
time between 1990 and a day after now (it names a date partition and orders recrawls), integers in
the ranges of their columns, strings of bounded length that encode as UTF-8 (no lone surrogates).
Fields no consumer uses (`links`, `content_type`, `duplicate_of`...) are not checked (decision 3741).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final

from udfs.records import SCHEMA_VERSION, ContractError, json_object

# Reason codes of a record that cannot be handled (a dead-letter line's `reason`).
EMPTY: Final = "empty"                 # no value (a tombstone)
MALFORMED: Final = "malformed"         # not JSON, or not a JSON object
VERSION: Final = "version"             # a schema version this release does not read
MISSING: Final = "missing"             # a required field is absent
WRONG_TYPE: Final = "wrong_type"       # a field of another JSON type
OUT_OF_RANGE: Final = "out_of_range"   # a number outside its range, a string outside its form
TOO_LONG: Final = "too_long"           # a string longer than its bound
BAD_TEXT: Final = "bad_text"           # a string that is not valid Unicode (a lone surrogate)
INVALID_CONTROL: Final = "invalid_control"   # a crawl.control record udfs.control refuses

_U64: Final = 1 << 64
_I64: Final = 1 << 63
_LANG: Final = re.compile(r"[a-z]{2,3}")
_CONTENT_HASH: Final = re.compile(r"sha256:[0-9a-f]{64}")
# 1990-01-01T00:00:00Z: no page of a web crawl was fetched before it.
EARLIEST_FETCHED_AT: Final = 631_152_000.0


class BadRecord(ContractError):
    """A consumed record that cannot be handled: `reason` (a code above), `field` (None for the whole
    value) and the message, which names the field."""

    def __init__(self, reason: str, field: str | None, detail: str) -> None:
        super().__init__(f"{field or 'record'}: {detail}")
        self.reason = reason
        self.field = field


@dataclass(frozen=True)
class PageLimits:
    """The bounds a pages.parsed record must keep to be handled; anything outside is dead-lettered.

    earliest_fetched_at: the oldest `fetched_at` accepted, epoch seconds (631152000.0, 1990-01-01 UTC).
    future_skew_s: how far `fetched_at` may be ahead of the consumer's clock, seconds (86400: a day of
        clock skew; a later time would order recrawls wrongly and name a date yet to come).
    max_url_chars: length of `url` and `final_url` (8192, the frontier's bound on a URL in an event).
    max_title_chars: length of `title` (4096; the job keeps 300 by default, `extract.max_title_chars`).
    max_text_chars: length of `text` (4,000,000; the job keeps 200,000 by default, `extract.max_text_chars`).
    max_path_chars: length of `warc_path` (4096, PATH_MAX).
    max_reason_chars: length of `optout.reason` (4096; a few signals of a few dozen characters each).
    """

    earliest_fetched_at: float = EARLIEST_FETCHED_AT
    future_skew_s: float = 86_400.0
    max_url_chars: int = 8192
    max_title_chars: int = 4096
    max_text_chars: int = 4_000_000
    max_path_chars: int = 4096
    max_reason_chars: int = 4096

    def __post_init__(self) -> None:
        if not (_finite(self.earliest_fetched_at) and self.earliest_fetched_at >= 0):
            raise ValueError(f"earliest_fetched_at must be a finite epoch time >= 0, got {self.earliest_fetched_at!r}")
        if not (_finite(self.future_skew_s) and 0 <= self.future_skew_s <= 366 * 86_400):
            raise ValueError(f"future_skew_s must be in [0, 31622400] seconds, got {self.future_skew_s!r}")
        for name in ("max_url_chars", "max_title_chars", "max_text_chars", "max_path_chars", "max_reason_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100_000_000:
                raise ValueError(f"{name} must be an integer in [1, 100000000], got {value!r}")


def _finite(value: Any) -> bool:
    """An int or a finite float, not a bool; never raises (an int of 400 digits is finite, and
    math.isfinite would overflow converting it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


DEFAULT_PAGE_LIMITS: Final = PageLimits()


def read_page(raw: bytes | str | None, now: float, limits: PageLimits = DEFAULT_PAGE_LIMITS) -> dict[str, Any]:
    """A pages.parsed value as a dict, after checking every field the consumers use against the
    contract and `limits` at epoch time `now`; raises BadRecord (a ContractError) naming the field."""
    if raw is None:
        raise BadRecord(EMPTY, None, "empty value (a tombstone?)")
    try:
        page = json_object(raw)
    except ContractError as exc:
        raise BadRecord(MALFORMED, None, str(exc).removeprefix("record: ")) from None
    version = page.get("v")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise BadRecord(VERSION, "v",
                        f"unsupported schema version {_show(version)} (this release reads {SCHEMA_VERSION})")
    for name, kinds in _FIELDS.items():
        if name not in page:
            raise BadRecord(MISSING, name, "missing")
        if not isinstance(page[name], kinds) or isinstance(page[name], bool):
            raise BadRecord(WRONG_TYPE, name, f"wrong type {type(page[name]).__name__}" + (
                f" ({_show(page[name])}; an integer beyond 64 bits reads as a float)"
                if kinds is int and isinstance(page[name], float) else ""))
    _check_time(page["fetched_at"], now, limits)
    for name, low, high in _INTEGERS:
        if not low <= page[name] < high:
            raise BadRecord(OUT_OF_RANGE, name, f"{_show(page[name])} outside [{low}, {high - 1}]")
    for name, high in (("url", limits.max_url_chars), ("final_url", limits.max_url_chars),
                       ("title", limits.max_title_chars), ("text", limits.max_text_chars),
                       ("warc_path", limits.max_path_chars)):
        _check_text(name, page[name], high)
    for name in ("url", "final_url", "warc_path"):
        if not page[name]:
            raise BadRecord(OUT_OF_RANGE, name, "empty")
    if page["lang"] is not None and not _LANG.fullmatch(page["lang"]):
        raise BadRecord(OUT_OF_RANGE, "lang", f"{_show(page['lang'])} is not an ISO 639 primary subtag")
    if not _CONTENT_HASH.fullmatch(page["content_hash"]):
        raise BadRecord(OUT_OF_RANGE, "content_hash", f"{_show(page['content_hash'])} is not sha256:<64 hex>")
    _check_optout(page.get("optout"), limits)
    return page


def _check_time(fetched_at: int | float, now: float, limits: PageLimits) -> None:
    latest = now + limits.future_skew_s
    if not (_finite(fetched_at) and limits.earliest_fetched_at <= fetched_at <= latest):
        raise BadRecord(OUT_OF_RANGE, "fetched_at", f"{_show(fetched_at)} outside [{limits.earliest_fetched_at:.0f}, "
                                                    f"{latest:.0f}] (1990-01-01 to a day after now)")


def _check_text(name: str, value: str | None, high: int) -> None:
    if value is None:
        return
    if len(value) > high:
        raise BadRecord(TOO_LONG, name, f"{len(value)} characters > {high}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRecord(BAD_TEXT, name, f"not valid Unicode ({exc.reason} at {exc.start})") from None


def _check_optout(optout: Any, limits: PageLimits) -> None:
    if optout is None:
        return
    if not (isinstance(optout, dict) and isinstance(optout.get("reserved"), bool)
            and isinstance(optout.get("reason"), str)):
        raise BadRecord(WRONG_TYPE, "optout", "must be {\"reserved\": bool, \"reason\": str}")
    _check_text("optout.reason", optout["reason"], limits.max_reason_chars)


def _show(value: Any) -> str:
    """A value for a message, cut to 80 characters (a poison string may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# The fields the consumers use and their JSON types (schemas/pages.parsed.v1.json).
_FIELDS: Final[dict[str, type | tuple[type, ...]]] = {
    "url": str, "url_fp": int, "final_url": str, "fetched_at": (int, float), "http_status": int,
    "content_hash": str, "simhash": int, "title": (str, type(None)), "lang": (str, type(None)), "text": str,
    "warc_path": str, "warc_offset": int, "warc_length": int,
}
# Integer fields and their ranges [low, high): the schema's, within the Parquet column types
# (url_fp and simhash uint64, warc_offset and warc_length int64).
_INTEGERS: Final = (("url_fp", 0, _U64), ("simhash", 0, _U64), ("http_status", 100, 600),
                    ("warc_offset", 0, _I64), ("warc_length", 1, _I64))
