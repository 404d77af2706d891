"""Pure helpers that turn one fetch's outcome into record fields (errors as data).

The fetch operator builds every outcome, success or failure, through `fetch_result` so a failure
travels as a `FetchResult` with a `FetchStatus` and a reason (errors are data, never raised); the
completion fields the frontier needs (redirect target, Retry-After) are read back from the headers
here rather than carried twice. `CappedDecoder` undoes Content-Encoding under the decompressed-size
cap (decision 0901).
"""
from __future__ import annotations

import collections
import email.utils
from typing import Callable, Final

import brotli
from zlib_ng import zlib_ng

from udfs.records import FetchRequest, FetchResult, FetchStatus
from udfs.urls import normalize_url, written_order

REDIRECT_CODES: Final = frozenset({301, 302, 303, 307, 308})
# A Retry-After beyond this is treated as this (a server must not park a host for ever).
MAX_RETRY_AFTER_S: Final = 7 * 24 * 3600.0


def fetch_result(
    request: FetchRequest,
    status: FetchStatus,
    *,
    reason: str = "",
    started_at: float,
    done_at: float,
    url: str | None = None,
    http_status: int | None = None,
    http_reason: str = "",
    http_version: str = "",
    headers: list[tuple[str, str]] | None = None,
    request_headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    ip: str | None = None,
    truncated: str | None = None,
) -> FetchResult:
    """One `FetchResult` (udfs/records.py); `url` defaults to the requested URL (docs/architecture.md §3)."""
    return FetchResult(
        request=request,
        url=url if url is not None else request["url"],
        fetch_status=status.value,
        reason=reason,
        http_status=http_status,
        http_reason=http_reason,
        http_version=http_version,
        headers=list(headers or []),
        request_headers=list(request_headers or []),
        body=body,
        ip=ip,
        started_at=started_at,
        done_at=done_at,
        truncated=truncated,
    )


def header_value(headers: list[tuple[str, str]], name: str) -> str | None:
    """The first value of header `name` (case-insensitive), or None."""
    wanted = name.lower()
    for key, value in headers:
        if key.lower() == wanted:
            return value
    return None


def redirect_written(url: str, headers: list[tuple[str, str]], target: str) -> str | None:
    """The redirect target in the query order its Location wrote, when sorting changed it (decision 1807)."""
    location = header_value(headers, "location")
    return written_order(location.strip(), target, base=url) if location else None


def redirect_target(url: str, http_status: int | None, headers: list[tuple[str, str]]) -> str | None:
    """The normalised absolute Location of a 3xx response, or None (RFC 9110 §15.4, §10.2.2).

    Never raises: a missing or unusable Location gives None.
    """
    if http_status not in REDIRECT_CODES:
        return None
    location = header_value(headers, "location")
    if location is None or not location.strip():
        return None
    try:
        return normalize_url(location.strip(), base=url)
    except Exception:  # noqa: BLE001 - hostile Location values must not fail the task
        return None


def retry_after_seconds(headers: list[tuple[str, str]], now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or HTTP-date, RFC 9110 §10.2.3).

    Clamped to [0, MAX_RETRY_AFTER_S]; None when absent or unparsable. Never raises.
    """
    value = header_value(headers, "retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return min(max(when.timestamp() - now, 0.0), MAX_RETRY_AFTER_S)


def is_complete_page(result: FetchResult) -> bool:
    """Whether a page result carries a 200 body worth parsing and publishing (§1 parse).

    A body cut at its size cap still counts: its first megabytes hold the text and most links.
    """
    return result["http_status"] == 200 and result["fetch_status"] in _PARSEABLE


_PARSEABLE: Final = frozenset({FetchStatus.OK.value, FetchStatus.TOO_LARGE.value})


def is_archived(result: FetchResult) -> bool:
    """Whether a fetch is archived: a response arrived and its body is what the server sent, maybe cut.

    Not archived: no response (DNS, connect, blocked), a refused type (body never read), or an
    unreadable response (oversized head, unknown or corrupt Content-Encoding).
    """
    return result["http_status"] is not None and result["fetch_status"] in _ARCHIVED


_ARCHIVED: Final = frozenset({FetchStatus.OK.value, FetchStatus.TOO_LARGE.value, FetchStatus.TOO_SLOW.value,
                              FetchStatus.TIMEOUT.value, FetchStatus.CONN_ERROR.value})


def is_not_modified(result: FetchResult) -> bool:
    """Whether an archived result is a recrawl's 304 for a capture the frontier carried (decision 1113)."""
    return result["http_status"] == 304 and bool(result["request"].get("revisit_of")) and is_archived(result)


def warc_http_version(result: FetchResult) -> str:
    """The HTTP version of the response as its WARC records write it ("HTTP/1.1" when not known)."""
    return "HTTP/" + (result.get("http_version") or "1.1")


def brotli_window(first_byte: int) -> int:
    """The sliding window (bytes) a brotli stream declares in its first byte (RFC 7932 §9.1, WBITS):
    what its decoder may allocate, whatever the stream's length. The large-window extension's marker
    (which standard decoders refuse) reads as its largest window, 1 GiB."""
    if not first_byte & 1:
        return (1 << 16) - 16
    n = (first_byte >> 1) & 7
    if n:
        return (1 << (17 + n)) - 16
    m = (first_byte >> 4) & 7
    if m == 1:
        return (1 << 30) - 16
    return (1 << (8 + m if m else 17)) - 16


class UnsupportedEncoding(ValueError):
    """A Content-Encoding the fetcher cannot decode (the value is in the message)."""


class CappedDecoder:
    """Incremental Content-Encoding decoder that never produces more than `limit` bytes.

    Implements the decompressed-size cap of the fetch limits (docs/architecture.md §7): a gzip, deflate or
    brotli bomb stops after `limit + 1` decoded bytes, whatever its ratio. `feed(data, max_out)` returns
    the decoded bytes (already cut at the cap), at most `max_out` of them, and sets `over_limit` once
    the cap is reached; input that still holds output stays inside (`pending`) and comes out at the next
    `feed`, with or without new data, so a caller can decode a bomb in slices it has room for.
    Corrupt input raises one of `DECODE_ERRORS`.
    """

    def __init__(self, content_encoding: str | None, limit: int) -> None:
        encoding = (content_encoding or "identity").strip().lower()
        if encoding not in _DECODERS:
            raise UnsupportedEncoding(f"unsupported Content-Encoding {content_encoding!r}")
        self.encoding = encoding
        self.limit = limit
        self.produced = 0
        self.over_limit = False
        self._state = _DECODERS[encoding]()
        self._backlog: collections.deque[bytes] = collections.deque()   # wire chunks not yet decoded
        self._more = False   # the input given may still hold output (the decoder's word, after output)

    @property
    def room(self) -> int:
        """Decoded bytes still allowed under the cap."""
        return self.limit - self.produced

    @property
    def pending(self) -> bool:
        """Whether input already fed may still give output."""
        return not self.over_limit and (self._more or bool(self._backlog))

    def feed(self, data: bytes = b"", max_out: int | None = None) -> bytes:
        """Decode the next wire chunk (or go on with what earlier ones hold); returns at most `max_out`
        bytes (default: no bound but the cap)."""
        if self.over_limit:
            return b""
        if data:
            self._backlog.append(data)
        room = self.limit - self.produced
        want = room + 1 if max_out is None else min(max_out, room + 1)
        out = bytearray()
        while len(out) < want and (self._more or self._backlog):
            ask = want - len(out)
            piece = self._state.decode(b"" if self._more else self._backlog.popleft(), ask)
            self._more = bool(piece) and self._state.more
            out += piece
        if len(out) > room:
            self.over_limit = True
            del out[room:]
        self.produced += len(out)
        return bytes(out)


# Each decoder's `decode(data, max_out)` gives at most `max_out` bytes; its `more` then says whether the
# input given so far may hold more output (a call with no new data gets it).


class _Identity:
    def __init__(self) -> None:
        self._rest = b""

    @property
    def more(self) -> bool:
        return bool(self._rest)

    def decode(self, data: bytes, max_out: int) -> bytes:
        data = self._rest + data if self._rest else data
        self._rest = data[max_out:]
        return data[:max_out]


# What corrupt input to `CappedDecoder.feed` raises.
DECODE_ERRORS: Final = (zlib_ng.error, brotli.error)


class _Zlib:
    """gzip (possibly several members) or deflate (zlib-wrapped, or raw as some servers send it), inflated by
    zlib-ng: zlib's format and interface in about half its CPU time."""

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._obj = zlib_ng.decompressobj(wbits)
        self._first = True
        self._filled = False

    @property
    def more(self) -> bool:
        obj = self._obj
        if obj.eof:
            return bool(obj.unused_data) and self._wbits > 0
        return bool(obj.unconsumed_tail) or self._filled

    def decode(self, data: bytes, max_out: int) -> bytes:
        if self._obj.eof:
            # The next gzip member (or zlib stream) starts in unused_data; after raw deflate nothing does.
            rest = self._obj.unused_data + data
            if self._wbits < 0 or not rest:
                return b""
            self._obj = zlib_ng.decompressobj(self._wbits)
            data = rest
        else:
            data = self._obj.unconsumed_tail + data
        try:
            out = self._obj.decompress(data, max_out)
        except zlib_ng.error:
            if not (self._first and self._wbits == zlib_ng.MAX_WBITS):
                raise
            self._wbits = -zlib_ng.MAX_WBITS
            self._obj = zlib_ng.decompressobj(self._wbits)
            out = self._obj.decompress(data, max_out)
        self._first = False
        # The next gzip member starts in unused_data once one member ends.
        while self._obj.eof and self._obj.unused_data and len(out) < max_out and self._wbits > 0:
            rest = self._obj.unused_data
            self._obj = zlib_ng.decompressobj(self._wbits)
            out += self._obj.decompress(rest, max_out - len(out))
        self._filled = len(out) >= max_out   # inflate may hold output back when its room runs out
        return out


class _Brotli:
    """brotli's output limit is loose (a call gives up to about twice what it asked for, in buffer
    blocks), so it is asked for half the room and a surplus waits here for the next call. Its
    `can_accept_more_data` does not say that the input given is used up, so only a call that gave
    nothing does."""

    def __init__(self) -> None:
        self._obj = brotli.Decompressor()
        self._rest = b""
        self._drained = False

    @property
    def more(self) -> bool:
        return bool(self._rest) or not self._drained

    def decode(self, data: bytes, max_out: int) -> bytes:
        self._drained = False
        if data or len(self._rest) < max_out:
            got = self._obj.process(data, output_buffer_limit=max(1, (max_out - len(self._rest)) // 2))
            self._drained = not got
            self._rest = self._rest + got if self._rest else got
        out, self._rest = self._rest[:max_out], self._rest[max_out:]
        return out


_DECODERS: Final[dict[str, Callable[[], _Identity | _Zlib | _Brotli]]] = {
    "identity": _Identity,
    "gzip": lambda: _Zlib(16 + zlib_ng.MAX_WBITS),
    "x-gzip": lambda: _Zlib(16 + zlib_ng.MAX_WBITS),
    "deflate": lambda: _Zlib(zlib_ng.MAX_WBITS),
    "br": _Brotli,
}
