"""Pure building of WARC/1.1 records and CDXJ index lines (ISO 28500:2017, "WARC 1.1").

Building a record is pure; writing it is I/O (a later operator appends `record.to_gzip()` to a file
and indexes it with `cdxj_line`). Time and record ids come through injected seams (`Clock`,
`RecordIds`) so tests compare golden bytes (warcio's `_make_warc_id` / `_make_warc_date` idea).

What is stored (docs/decisions/0500, 0501):
- The HTTP payload is stored as the fetcher hands it over: de-chunked and content-decoded. The
  headers that described the transfer are kept under an `X-Crawler-` prefix and a `Content-Length`
  equal to the stored length is written, so every reader (warcio, jwarc, FastWARC) finds the same
  payload and the digests, computed over exactly the stored bytes, validate everywhere.
- Digests are SHA-1 in base32 (`sha1:` + 32 characters), the convention every WARC and CDX tool reads.
- One gzip member per record (`to_gzip`), so any record can be read from its offset alone.
- A response block may come packed (`PackedBlock`, decision 1823): deflated where the page was parsed,
  then joined behind the record's deflated named fields into that one gzip member.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
import struct
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from urllib.parse import urlsplit

import deflate as libdeflate
from zlib_ng import gzip_ng, zlib_ng

from udfs.urls import DEFAULT_PORTS

WARC_VERSION = "WARC/1.1"
PROFILE_IDENTICAL_PAYLOAD = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
PROFILE_SERVER_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
TRUNCATION_REASONS = frozenset({"length", "time", "disconnect", "unspecified"})  # WARC 1.1 §5.13
DIGEST_ALGORITHMS = frozenset({"sha1", "sha256"})
DATE_PRECISIONS = frozenset({"seconds", "microseconds"})

RECORD_END = b"\r\n\r\n"    # two CRLFs close every record (WARC 1.1 §4)
# The header gzip_ng.compress(..., mtime=0) writes: deflate, no flags, mtime 0, no extra flags, unknown OS.
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"

CT_WARC_FIELDS = "application/warc-fields"
CT_HTTP_REQUEST = "application/http;msgtype=request"
CT_HTTP_RESPONSE = "application/http;msgtype=response"

# Headers renamed because the stored payload does not have the shape they describe.
STORED_PREFIX = "X-Crawler-"

_CTL = re.compile(r"[\x00-\x1f\x7f]")

Clock = Callable[[], datetime]
RecordIds = Callable[[], str]
Fields = Sequence[tuple[str, str]]


def utc_now() -> datetime:
    """The default `Clock`: the current time in UTC (WARC 1.1 §5.4 dates are UTC)."""
    return datetime.now(timezone.utc)


def uuid4_record_id() -> str:
    """The default `RecordIds`: a fresh `<urn:uuid:...>` (WARC 1.1 §5.2, globally unique)."""
    return f"<urn:uuid:{uuid.uuid4()}>"


@dataclasses.dataclass(frozen=True)
class WarcPolicy:
    """How records are written (config section `warc`).

    digest_algorithm: "sha1" (default; what CDX indexes and dedup tools expect) or "sha256";
        both are written in base32 and accepted by warcio, jwarc and FastWARC.
    date_precision: "microseconds" (default; WARC 1.1 §5.4 allows fractions, as warcio writes
        for 1.1) or "seconds" (the WARC 1.0 form, for readers that only know it).
    gzip_level: deflate level 1-9 of each record's gzip member (zlib-ng, decision 1822; libdeflate for the
        packed response block, decision 1831); 6 trades size for speed.
    software: the `software` field of warcinfo records.
    is_part_of: the crawl's name, the `isPartOf` field of warcinfo records ("crawl"); name each crawl,
        so its files say which collection they belong to.
    operator: who runs the crawl, a name and contact (the `operator` field of warcinfo records; empty,
        the default: none is written).
    pack_in_parse: true (default): each response block is deflated where its page is parsed and only a
        fifth of its bytes travel on to the writer; false: the writer deflates whole records.
    group_commit_ms: how long a capture written to a local file may wait for the fsync that makes it
        durable, its events held until then (in keyed state, decision 3780); the captures written
        meanwhile share that fsync (decision 1832). 0 (default): an fsync per capture and nothing held,
        which costs less than holding each capture in state where fsync is cheap.
        Object storage ignores it (an upload makes a file durable).
    lease_extend_every_s: while a held capture's events wait (an upload, above all during an object-store
        outage), the writer sends the frontier a `lease_extend` for its page lease this often, the first
        one this long after it was held or this long before the lease's deadline if that comes sooner,
        so the lease does not expire and get charged as a timeout (udfs.lease_extension, decision 3783).
        20 s (default), or a third of `frontier.lease_timeout_s` when that is shorter; the configuration
        refuses more than half of it. 0 sends none.
    """

    digest_algorithm: str = "sha1"
    date_precision: str = "microseconds"
    gzip_level: int = 6
    software: str = "flink-crawler/0.1.0"
    pack_in_parse: bool = True
    group_commit_ms: int = 0
    lease_extend_every_s: float = 20.0
    is_part_of: str = "crawl"
    operator: str = ""

    def __post_init__(self) -> None:
        if self.digest_algorithm not in DIGEST_ALGORITHMS:
            raise ValueError(f"warc.digest_algorithm must be one of {sorted(DIGEST_ALGORITHMS)}, "
                             f"not {self.digest_algorithm!r}")
        if self.date_precision not in DATE_PRECISIONS:
            raise ValueError(f"warc.date_precision must be one of {sorted(DATE_PRECISIONS)}, "
                             f"not {self.date_precision!r}")
        if not isinstance(self.gzip_level, int) or not 1 <= self.gzip_level <= 9:
            raise ValueError(f"warc.gzip_level must be an integer from 1 to 9, not {self.gzip_level!r}")
        if not self.software or _CTL.search(self.software):
            raise ValueError("warc.software must be a non-empty single line")
        if not self.is_part_of or _CTL.search(self.is_part_of):
            raise ValueError("warc.is_part_of must be a non-empty single line")
        if _CTL.search(self.operator):
            raise ValueError("warc.operator must be a single line")
        if not isinstance(self.group_commit_ms, int) or isinstance(self.group_commit_ms, bool) \
                or not 0 <= self.group_commit_ms <= 10_000:
            raise ValueError(f"warc.group_commit_ms must be an integer from 0 to 10000, not {self.group_commit_ms!r}")
        every = self.lease_extend_every_s
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 <= every <= 3_600:
            raise ValueError(f"warc.lease_extend_every_s must be a number of seconds from 0 (none) to 3600, "
                             f"not {every!r}")
        if not isinstance(self.pack_in_parse, bool):
            raise ValueError(f"warc.pack_in_parse must be true or false, not {self.pack_in_parse!r}")


ROBOTS_POLICY = "obey"   # the warcinfo `robots` field: every request obeys robots.txt (RFC 9309)


def crawl_warcinfo_fields(policy: WarcPolicy, user_agent: str, hostname: str) -> tuple[tuple[str, str], ...]:
    """The warcinfo fields that describe the crawl beside `software` and `format` (WARC 1.1 §6.2 and the
    IIPC's WARC guidelines): the crawl it is part of, the machine that wrote the file, who operates the
    crawl (when configured), its robots policy and the User-Agent every request carried."""
    fields = [("isPartOf", policy.is_part_of), ("hostname", hostname)]
    if policy.operator:
        fields.append(("operator", policy.operator))
    fields += [("robots", ROBOTS_POLICY), ("http-header-user-agent", user_agent)]
    return tuple(fields)


@dataclasses.dataclass(frozen=True)
class RecordInfo:
    """What an index needs to know about one record (the fields of a CDXJ line)."""

    record_id: str
    warc_type: str
    target_uri: str | None
    date: str                  # the WARC-Date value as written
    mime: str | None           # payload media type without parameters ("warc/revisit" for revisits)
    status: int | None         # HTTP status of response and revisit records
    digest: str | None         # payload digest ("sha1:..."), as an index reports it


@dataclasses.dataclass(frozen=True)
class PackedBlock:
    """A response record's block (HTTP head + payload) and the record's closing CRLFs, deflated ahead of
    the record, with what the record's named fields need to know of them.

    The stage that parsed the page packs it, so the decoded page does not travel on to the writer (a
    fifth of the bytes do); the writer deflates only the named fields in front, which depend on the file
    (WARC-Warcinfo-ID) and on dedup (the record id), and `member` joins the two into one gzip member: a
    deflate stream ended by a sync flush may be followed by another, and CRC-32s combine.
    """

    deflated: bytes          # raw deflate of block + RECORD_END, ending in a final block
    crc: int                 # CRC-32 of block + RECORD_END
    length: int              # len(block): the record's Content-Length
    block_digest: str
    payload_digest: str
    payload_length: int
    status: int
    mime: str | None         # the payload's media type, as an index reports it

    def inflate(self) -> bytes:
        """The block itself (for `WarcRecord.to_bytes`; writing never needs it)."""
        return zlib_ng.decompress(self.deflated, -zlib_ng.MAX_WBITS)[: self.length]

    def member(self, front: bytes, level: int) -> bytes:
        """One gzip member holding `front` (version line and named fields) then this block: RFC 1952."""
        compressor = zlib_ng.compressobj(level, zlib_ng.DEFLATED, -zlib_ng.MAX_WBITS)
        rest = self.length + len(RECORD_END)
        crc = zlib_ng.crc32_combine(zlib_ng.crc32(front), self.crc, rest)
        size = (len(front) + rest) & 0xFFFFFFFF
        return b"".join((GZIP_HEADER, compressor.compress(front), compressor.flush(zlib_ng.Z_SYNC_FLUSH),
                         self.deflated, struct.pack("<II", crc, size)))


@dataclasses.dataclass(frozen=True)
class WarcRecord:
    """One built record: its WARC named fields in order (Content-Length included) and its block."""

    fields: tuple[tuple[str, str], ...]
    block: bytes | PackedBlock
    info: RecordInfo

    @property
    def record_id(self) -> str:
        """The WARC-Record-ID (WARC 1.1 §5.2), e.g. for WARC-Concurrent-To or a revisit's WARC-Refers-To."""
        return self.info.record_id

    @property
    def date(self) -> str:
        """The WARC-Date value as written (WARC 1.1 §5.4), e.g. for a later revisit's WARC-Refers-To-Date."""
        return self.info.date

    def header(self, name: str) -> str | None:
        """The first value of WARC named field `name` (case-insensitive), or None."""
        lname = name.lower()
        return next((v for k, v in self.fields if k.lower() == lname), None)

    def front(self) -> bytes:
        """What comes before the block: version line, named fields and the empty line (WARC 1.1 §4)."""
        head = _header_bytes("".join(f"{k}: {v}\r\n" for k, v in self.fields))
        return b"".join((WARC_VERSION.encode(), b"\r\n", head, b"\r\n"))

    def to_bytes(self) -> bytes:
        """The uncompressed record: version line, named fields, CRLF, block, CRLF CRLF (WARC 1.1 §4)."""
        block = self.block.inflate() if isinstance(self.block, PackedBlock) else self.block
        return b"".join((self.front(), block, RECORD_END))

    def to_gzip(self, level: int = 6) -> bytes:
        """The record as exactly one gzip member (WARC 1.1 Annex D.2), mtime 0 so output is reproducible.

        zlib-ng writes the same format as zlib, about 0.5% larger at level 6, in half its CPU time.
        A packed block was deflated at its packer's level; only the named fields are deflated here."""
        if isinstance(self.block, PackedBlock):
            return self.block.member(self.front(), level)
        return gzip_ng.compress(self.to_bytes(), compresslevel=level, mtime=0)


@dataclasses.dataclass(frozen=True)
class RevisitTarget:
    """The earlier capture a revisit points at (WARC 1.1 §5.11, §5.19-5.20), e.g. from dedup state."""

    record_id: str
    target_uri: str
    date: str                   # its WARC-Date value, copied verbatim into WARC-Refers-To-Date
    payload_digest: str | None = None


def digest(data: bytes, algorithm: str = "sha1") -> str:
    """A WARC digest value `algorithm:BASE32` over exactly `data` (WARC 1.1 §5.8-5.9)."""
    return _digest_value(algorithm, hashlib.new(algorithm, data))


def _digest_value(algorithm: str, hashed: "hashlib._Hash") -> str:
    return f"{algorithm}:{base64.b32encode(hashed.digest()).decode('ascii')}"


def _payload_of(body: bytes | PackedBlock, algorithm: str) -> tuple[int, str]:
    """Length and digest of a payload, given as bytes or as the packed block holding it."""
    if isinstance(body, PackedBlock):
        _check_packed(body, algorithm)
        return body.payload_length, body.payload_digest
    return len(body), digest(body, algorithm)


def format_date(when: datetime | float, precision: str = "microseconds") -> str:
    """A WARC-Date value in UTC, `YYYY-MM-DDThh:mm:ssZ` or with six fraction digits (WARC 1.1 §5.4).

    `when` is an aware datetime or epoch seconds; naive datetimes are refused (their zone is unknown).
    """
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError("WARC dates need a timezone-aware datetime (got a naive one)")
        moment = when.astimezone(timezone.utc)
    else:
        moment = datetime.fromtimestamp(when, timezone.utc)
    if precision == "seconds":
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- HTTP header blocks ------------------------------------------------------------------------

_NOT_TCHAR = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_HTTP_VERSION = re.compile(r"HTTP/\d(\.\d)?")
_ORIGIN_FORM = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*([^#]*)")  # path and query of an absolute URL
_METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _field_name(name: str) -> str:
    # A name outside RFC 9110 token characters would end the header block or split the line early.
    return _NOT_TCHAR.sub("_", name) or "_"


def _field_value(value: str) -> str:
    # CR/LF would inject lines, NUL and other controls confuse parsers; tabs and spaces are kept.
    return _CTL.sub(lambda m: m.group(0) if m.group(0) == "\t" else " ", value).strip()


def _header_bytes(text: str) -> bytes:
    # Header text arrives decoded with surrogateescape (aiohttp): encode the original bytes back.
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def stored_http_headers(headers: Fields, stored_length: int) -> list[tuple[str, str]]:
    """The response headers as archived with a de-chunked, content-decoded payload.

    Transfer-Encoding and Content-Encoding (other than identity) become `X-Crawler-...`; a
    Content-Length that differs from `stored_length` is kept as `X-Crawler-Content-Length` and a
    correct one is appended. Names and values are made single-line tokens/text. Never raises.
    """
    out: list[tuple[str, str]] = []
    length_ok = False
    for raw_name, raw_value in headers:
        name, value = _field_name(raw_name), _field_value(raw_value)
        lname = name.lower()
        if lname == "transfer-encoding" or (
                lname == "content-encoding" and value.lower() not in ("", "identity")):
            name = STORED_PREFIX + name
        elif lname == "content-length":
            if value == str(stored_length) and not length_ok:
                length_ok = True
            else:
                name = STORED_PREFIX + name
        out.append((name, value))
    if not length_ok:
        out.append(("Content-Length", str(stored_length)))
    return out


def http_response_head(status: int, reason: str, headers: Fields, http_version: str = "HTTP/1.1") -> bytes:
    """Status line and header block of an HTTP response, ending in the blank line (RFC 9112 §4)."""
    lines = [f"{http_version} {status} {_field_value(reason)}".encode("ascii", "replace")]
    lines += [_header_bytes(f"{_field_name(k)}: {_field_value(v)}") for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def http_request_head(method: str, url: str, headers: Fields, http_version: str = "HTTP/1.1") -> bytes:
    """Request line (origin-form target from `url`) and header block of an HTTP request (RFC 9112 §3)."""
    match = _ORIGIN_FORM.match(safe_uri(url))
    rest = match.group(1) if match else ""
    target = rest if rest.startswith("/") else "/" + rest
    lines = [f"{method} {target} {http_version}".encode("ascii")]
    lines += [_header_bytes(f"{_field_name(k)}: {_field_value(v)}") for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def safe_uri(url: str) -> str:
    """`url` with spaces, controls and non-ASCII percent-encoded, fit for WARC-Target-URI (§5.3)."""
    return "".join(
        c if "\x20" < c < "\x7f" else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in url)


def warc_fields_block(fields: Fields) -> bytes:
    """An `application/warc-fields` block: one `name: value` line per field (WARC 1.1 §5.6, §6.2)."""
    return b"".join(_header_bytes(f"{_field_name(k)}: {_field_value(v)}") + b"\r\n" for k, v in fields)


def _mime(headers: Fields) -> str | None:
    # The media type without parameters, as cdxj-indexer reports it (split at ';' or whitespace).
    value = next((v for k, v in headers if k.lower() == "content-type"), None)
    if value is None:
        return None
    return re.split(r"[;\s]", value.strip(), maxsplit=1)[0] or None


# --- the builder -------------------------------------------------------------------------------

_RECORD_ID = re.compile(r"<[^\s<>]+>")


@dataclasses.dataclass(frozen=True)
class WarcBuilder:
    """Builds WARC/1.1 records (WARC 1.1 §6) with an injected clock and record-id factory.

    Every method returns a `WarcRecord`; dates default to `clock()` and may be given as an aware
    datetime or epoch seconds (the fetch time for captures).
    """

    policy: WarcPolicy = dataclasses.field(default_factory=WarcPolicy)
    ids: RecordIds = uuid4_record_id
    clock: Clock = utc_now

    # -- record types

    def warcinfo(self, filename: str, fields: Fields = (), *, date: datetime | float | None = None) -> WarcRecord:
        """A warcinfo record (WARC 1.1 §6.2) naming the file and describing the crawl.

        `software`, `format` and `conformsTo` come first; `fields` add e.g. isPartOf, operator,
        robots, http-header-user-agent.
        """
        block = warc_fields_block([
            ("software", self.policy.software),
            ("format", "WARC File Format 1.1"),
            ("conformsTo", "http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"),
            *fields,
        ])
        return self._record("warcinfo", block, CT_WARC_FIELDS, date=date,
                            extra=[("WARC-Filename", _field_value(filename))])

    def request(self, url: str, headers: Fields = (), *, method: str = "GET", body: bytes = b"",
                date: datetime | float | None = None, ip: str | None = None,
                concurrent_to: str | None = None, warcinfo_id: str | None = None,
                http_version: str = "HTTP/1.1") -> WarcRecord:
        """A request record (WARC 1.1 §6.4): the HTTP request as sent, linked to its response."""
        _check_http_version(http_version)
        if not _METHOD.fullmatch(method):
            raise ValueError(f"HTTP method must be a token, not {method!r}")
        block = http_request_head(method, url, headers, http_version) + body
        return self._record("request", block, CT_HTTP_REQUEST, url=url, date=date, ip=ip,
                            warcinfo_id=warcinfo_id, concurrent_to=concurrent_to)

    def pack_response(self, status: int, reason: str, headers: Fields, body: bytes, *,
                      http_version: str = "HTTP/1.1") -> PackedBlock:
        """The block `response` builds from these, packed for a writer elsewhere:
        deflated at the policy's `gzip_level`, digested with its `digest_algorithm`. Raises as `response` does."""
        head, stored = _stored_response_head(status, reason, headers, len(body), http_version)
        algorithm = self.policy.digest_algorithm
        block_hash = hashlib.new(algorithm, head)
        block_hash.update(body)
        block = b"".join((head, body, RECORD_END))
        # libdeflate: one call over the whole block, smaller and faster than a zlib stream at the same
        # level; the block ends the member, so its final deflate block ends the stream.
        return PackedBlock(deflated=libdeflate.deflate_compress(block, self.policy.gzip_level), crc=zlib_ng.crc32(block),
                           length=len(head) + len(body), block_digest=_digest_value(algorithm, block_hash),
                           payload_digest=digest(body, algorithm), payload_length=len(body), status=status,
                           mime=_mime(stored))

    def response(self, url: str, status: int, reason: str, headers: Fields, body: bytes | PackedBlock, *,
                 date: datetime | float | None = None, ip: str | None = None,
                 truncated: str | None = None, warcinfo_id: str | None = None,
                 concurrent_to: str | None = None, http_version: str = "HTTP/1.1",
                 record_id: str | None = None) -> WarcRecord:
        """A response record (WARC 1.1 §6.3) with the de-chunked, decoded `body` as its payload.

        `headers` are the response headers as received, in order; `truncated` is the WARC-Truncated
        reason when the fetcher capped the body; `record_id` replaces the factory's id (dedup names
        response records before they are built). Never raises on hostile header names/values or body.
        A `body` packed by `pack_response` is the block already built: status, reason and headers as packed.
        """
        if isinstance(body, PackedBlock):
            return self._record("response", body, CT_HTTP_RESPONSE, url=url, date=date, ip=ip,
                                warcinfo_id=warcinfo_id, concurrent_to=concurrent_to, truncated=truncated,
                                payload_digest=body.payload_digest, status=body.status, mime=body.mime,
                                record_id=record_id)
        head, stored = _stored_response_head(status, reason, headers, len(body), http_version)
        return self._record("response", head + body, CT_HTTP_RESPONSE, url=url, date=date, ip=ip,
                            warcinfo_id=warcinfo_id, concurrent_to=concurrent_to,
                            truncated=truncated, payload=body, status=status, mime=_mime(stored),
                            record_id=record_id)

    def capture(self, url: str, request_headers: Fields, status: int, reason: str, headers: Fields,
                body: bytes | PackedBlock, *, date: datetime | float | None = None, ip: str | None = None,
                truncated: str | None = None, warcinfo_id: str | None = None,
                method: str = "GET", http_version: str = "HTTP/1.1",
                response_id: str | None = None) -> tuple[WarcRecord, WarcRecord]:
        """A response and its request (WARC 1.1 §6.3-6.4), same date, the request concurrent to the response."""
        when = self.clock() if date is None else date   # one moment for both records
        response = self.response(url, status, reason, headers, body, date=when, ip=ip,
                                 truncated=truncated, warcinfo_id=warcinfo_id, http_version=http_version,
                                 record_id=response_id)
        request = self.request(url, request_headers, method=method, date=when, ip=ip,
                               concurrent_to=response.record_id, warcinfo_id=warcinfo_id,
                               http_version=http_version)
        return response, request

    def revisit_identical(self, url: str, status: int, reason: str, headers: Fields, body: bytes | PackedBlock,
                          original: RevisitTarget, *, date: datetime | float | None = None,
                          ip: str | None = None, warcinfo_id: str | None = None,
                          http_version: str = "HTTP/1.1") -> WarcRecord:
        """A revisit record, identical-payload-digest profile (WARC 1.1 §6.7.2).

        The block holds only the new response's headers; the payload digest is computed from
        `body` (the payload just fetched, or the block packing it), so it equals the original's whenever
        dedup was right.
        """
        length, payload_digest = _payload_of(body, self.policy.digest_algorithm)
        head, _ = _stored_response_head(status, reason, headers, length, http_version)
        return self._record("revisit", head, CT_HTTP_RESPONSE, url=url, date=date, ip=ip,
                            warcinfo_id=warcinfo_id, payload_digest=payload_digest, status=status,
                            mime="warc/revisit", profile=PROFILE_IDENTICAL_PAYLOAD, refers=original)

    def revisit_not_modified(self, url: str, status: int, reason: str, headers: Fields,
                             original: RevisitTarget, *, date: datetime | float | None = None,
                             ip: str | None = None, warcinfo_id: str | None = None,
                             http_version: str = "HTTP/1.1") -> WarcRecord:
        """A revisit record, server-not-modified profile (WARC 1.1 §6.7.3), for a 304 (or a 200 whose
        validators matched): the block is the response head, the payload digest the original's if known.
        """
        head, _ = _stored_response_head(status, reason, headers, 0, http_version)
        return self._record("revisit", head, CT_HTTP_RESPONSE, url=url, date=date, ip=ip,
                            warcinfo_id=warcinfo_id, status=status, mime="warc/revisit",
                            profile=PROFILE_SERVER_NOT_MODIFIED, refers=original,
                            payload_digest=original.payload_digest)

    def metadata(self, url: str, fields: Fields, *, date: datetime | float | None = None,
                 concurrent_to: str | None = None, refers_to: str | None = None,
                 warcinfo_id: str | None = None) -> WarcRecord:
        """A metadata record (WARC 1.1 §6.6) of `application/warc-fields`, e.g. a dedup verdict,
        linked to the capture it describes by WARC-Concurrent-To and/or WARC-Refers-To.
        """
        extra = [("WARC-Refers-To", _check_id(refers_to))] if refers_to else []
        return self._record("metadata", warc_fields_block(fields), CT_WARC_FIELDS, url=url, date=date,
                            warcinfo_id=warcinfo_id, concurrent_to=concurrent_to, extra=extra)

    def conversion(self, url: str, body: bytes, content_type: str, refers_to: str, *,
                   date: datetime | float | None = None, warcinfo_id: str | None = None) -> WarcRecord:
        """A conversion record (WARC 1.1 §6.8): another form of a capture's content, such as the DOM a
        browser built from a page, linked to the original response by WARC-Refers-To."""
        return self._record("conversion", body, content_type, url=url, date=date, warcinfo_id=warcinfo_id,
                            payload=body, mime=content_type.split(";")[0].strip(),
                            extra=[("WARC-Refers-To", _check_id(refers_to))])

    # -- shared assembly

    def _date(self, date: datetime | float | None) -> str:
        return format_date(self.clock() if date is None else date, self.policy.date_precision)

    def _record(self, warc_type: str, block: bytes | PackedBlock, content_type: str, *, url: str | None = None,
                date: datetime | float | None = None, ip: str | None = None,
                warcinfo_id: str | None = None, concurrent_to: str | None = None,
                truncated: str | None = None, payload: bytes | None = None,
                payload_digest: str | None = None, status: int | None = None, mime: str | None = None,
                profile: str | None = None, refers: RevisitTarget | None = None,
                extra: Fields = (), record_id: str | None = None) -> WarcRecord:
        algorithm = self.policy.digest_algorithm
        record_id = _check_id(self.ids() if record_id is None else record_id)
        when = self._date(date)
        target = safe_uri(url) if url is not None else None
        fields: list[tuple[str, str]] = [("WARC-Type", warc_type), ("WARC-Record-ID", record_id),
                                         ("WARC-Date", when)]
        if target is not None:
            fields.append(("WARC-Target-URI", target))
        if ip:
            fields.append(("WARC-IP-Address", _field_value(ip)))
        if warcinfo_id:
            fields.append(("WARC-Warcinfo-ID", _check_id(warcinfo_id)))
        if concurrent_to:
            fields.append(("WARC-Concurrent-To", _check_id(concurrent_to)))
        if profile:
            fields.append(("WARC-Profile", profile))
        if refers is not None:
            fields += [("WARC-Refers-To", _check_id(refers.record_id)),
                       ("WARC-Refers-To-Target-URI", safe_uri(refers.target_uri)),
                       ("WARC-Refers-To-Date", _field_value(refers.date))]
        fields += list(extra)
        if truncated is not None:
            if truncated not in TRUNCATION_REASONS:
                raise ValueError(f"WARC-Truncated must be one of {sorted(TRUNCATION_REASONS)}, not {truncated!r}")
            fields.append(("WARC-Truncated", truncated))
        if isinstance(block, PackedBlock):
            _check_packed(block, algorithm)
            block_digest, length = block.block_digest, block.length
        else:
            block_digest, length = digest(block, algorithm), len(block)
        fields.append(("WARC-Block-Digest", block_digest))
        if payload is not None:
            payload_digest = digest(payload, algorithm)
        if payload_digest:
            fields.append(("WARC-Payload-Digest", _field_value(payload_digest)))
        fields += [("Content-Type", content_type), ("Content-Length", str(length))]
        if payload_digest is None and isinstance(block, bytes) and warc_type in ("metadata", "warcinfo", "resource"):
            payload_digest = digest(block, algorithm)   # their payload is the whole block
        if mime is None and content_type == CT_WARC_FIELDS:
            mime = CT_WARC_FIELDS
        info = RecordInfo(record_id=record_id, warc_type=warc_type, target_uri=target, date=when,
                          mime=mime, status=status, digest=payload_digest)
        return WarcRecord(fields=tuple(fields), block=block, info=info)


def _check_id(record_id: str | None) -> str:
    if record_id is None or not _RECORD_ID.fullmatch(record_id):
        raise ValueError(f"a WARC record id must look like <urn:uuid:...>, not {record_id!r}")
    return record_id


def _stored_response_head(status: int, reason: str, headers: Fields, stored_length: int,
                          http_version: str) -> tuple[bytes, list[tuple[str, str]]]:
    """The HTTP head of a response record or revisit as stored, and its stored headers."""
    _check_status(status, http_version)
    stored = stored_http_headers(headers, stored_length)
    return http_response_head(status, reason, stored, http_version), stored


def _check_packed(block: PackedBlock, algorithm: str) -> None:
    # A block packed under another digest_algorithm would leave the record with mixed digests.
    if not block.block_digest.startswith(algorithm + ":"):
        raise ValueError(f"a block packed with {block.block_digest.split(':')[0]} digests cannot go in a record "
                         f"written with {algorithm} (warc.digest_algorithm must match where it is packed)")


def _check_http_version(http_version: str) -> None:
    if not _HTTP_VERSION.fullmatch(http_version):
        raise ValueError(f"http_version must look like HTTP/1.1, not {http_version!r}")


def _check_status(status: int, http_version: str) -> None:
    _check_http_version(http_version)
    if not isinstance(status, int) or not 100 <= status <= 999:
        raise ValueError(f"HTTP status must be an integer from 100 to 999, not {status!r}")


# --- CDXJ --------------------------------------------------------------------------------------

_WWW = re.compile(r"^www\d*\.")
_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")
_SESSION_ARG = re.compile(r"(jsessionid|phpsessid|sid)=[0-9a-z]{32}|aspsessionid[a-z]{8}=[a-z]{24}|cf(id|token)=[^&]*")


def _unescape_fully(text: str) -> bytes:
    # Decode %XX until nothing changes, so every spelling of a URL gets one key.
    data = text.encode("utf-8", "surrogatepass")
    while True:
        decoded = _PERCENT.sub(lambda m: bytes([int(m.group(1), 16)]), data)
        if decoded == data:
            return data
        data = decoded


def _escape_minimally(data: bytes) -> str:
    # Only what cannot stand in a key: controls, space, non-ASCII, '#' and '%'.
    return "".join(f"%{b:02X}" if b <= 0x20 or b >= 0x7F or b in b"#%" else chr(b) for b in data)


def _host_key(host: str) -> str:
    raw = _unescape_fully(host)
    try:
        # Internationalised names are keyed in their ASCII (punycode) form, as IDNA-aware clients send them.
        name = raw.decode("utf-8").lower().strip(".")
        name = re.sub(r"\.{2,}", ".", name)
        name = name if name.isascii() else name.encode("idna").decode("ascii")
    except UnicodeError:
        name = _escape_minimally(raw).lower().strip(".")
    name = _WWW.sub("", name)
    return name if ":" in name else ",".join(reversed(name.split(".")))


def _without_session_ids(query: str) -> list[str]:
    # A session id takes the '&' after it along; a last one leaves the '&' before it (an empty
    # argument), which the IA canonicaliser keeps and sorts first.
    args = query.split("&")
    kept = [a for a in args if not _SESSION_ARG.fullmatch(a)]
    if len(args) > 1 and _SESSION_ARG.fullmatch(args[-1]):
        kept.append("")
    return kept


def surt(url: str) -> str:
    """The SURT sort key of `url` as pywb/cdxj-indexer write it (`com,example)/path?a=1&b=2`).

    Like the IA canonicaliser behind them: percent-escapes decoded except where a key cannot hold
    the byte; host lowercased and reversed without `www.`, user info and default port; dot and empty
    path segments removed, a trailing slash dropped; query arguments lowercased, 32-character session
    ids dropped, arguments sorted (empty ones kept); fragment dropped. Never raises: an unparsable URL is returned lowercased.
    """
    try:
        parts = urlsplit(re.sub(r"[\t\r\n]", "", url.strip()))
        port = parts.port
    except ValueError:
        return url.lower()
    if not parts.netloc:
        return url.lower()
    key = _host_key(parts.hostname or "")
    if port is not None and port != DEFAULT_PORTS.get(parts.scheme.lower()):
        key += f":{port}"
    segments: list[str] = []
    for segment in _escape_minimally(_unescape_fully(parts.path)).split("/"):
        if segment == ".." and segments and segments[-1] != "..":
            segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    query = "&".join(sorted(_without_session_ids(_escape_minimally(_unescape_fully(parts.query)).lower())))
    return (key + ")/" + "/".join(segments)).lower() + (f"?{query}" if query else "")


def cdxj_timestamp(warc_date: str) -> str:
    """The 14-digit CDX(J) timestamp (`YYYYMMDDhhmmss`) of a WARC-Date value, as warcio's
    `iso_date_to_timestamp` gives it; fractions are dropped."""
    return re.sub(r"\D", "", warc_date)[:14].ljust(14, "0")


def cdxj_line(record_info: RecordInfo, warc_path: str, offset: int, length: int) -> str:
    """One CDXJ index line (`SURT timestamp {json}`) in cdxj-indexer's default form.

    `offset` and `length` are of the record's gzip member within `warc_path`. JSON keys in order
    url, mime, status, digest, length, offset, filename, absent ones left out, values as strings.
    """
    entry: dict[str, str] = {"url": record_info.target_uri or ""}
    if record_info.mime:
        entry["mime"] = record_info.mime
    if record_info.status is not None:
        entry["status"] = str(record_info.status)
    if record_info.digest:
        entry["digest"] = record_info.digest
    entry.update(length=str(length), offset=str(offset), filename=warc_path)
    return f"{surt(entry['url'])} {cdxj_timestamp(record_info.date)} {json.dumps(entry)}"


def indexed_by_default(record_info: RecordInfo) -> bool:
    """Whether cdxj-indexer's default selection indexes this record: response, revisit, resource and
    metadata records, but not those whose payload is `application/warc-fields`.
    """
    if record_info.warc_type not in ("response", "revisit", "resource", "metadata"):
        return False
    return record_info.mime != CT_WARC_FIELDS


def member_record_id(member: bytes) -> str | None:
    """The WARC-Record-ID of the record `member` holds when it is exactly one whole gzip member of a
    WARC record (what a published location must point at); None if it is torn, corrupt, longer than
    one member or not a WARC record. Lets a writer check, after a restore, that a capture it wrote
    before is still where it wrote it."""
    inflater = zlib_ng.decompressobj(wbits=31)
    try:
        raw = inflater.decompress(member)
    except zlib_ng.error:
        return None
    if not inflater.eof or inflater.unused_data or not raw.startswith(b"WARC/"):
        return None
    head = raw.split(RECORD_END, 1)[0]
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"warc-record-id":
            return value.strip().decode("latin-1")
    return None
