"""The data contracts between the job's operators and on its Kafka topics.

Records are plain JSON-compatible dicts (never pickled project classes), each carrying the schema
version `v`, so a new release can read what an old one wrote (docs/architecture.md §3). The TypedDicts
below document the fields; `encode`/`decode` are the one place that turns them into topic bytes.

Topics
- `crawl.frontier` (key = host_key): `DiscoveredBatch` events: new URLs from pages, seeds, redirects;
  `RenderRequest` events: a fetched page the parse step picked for rendering (decision 3905).
- `crawl.outcomes` (key = host_key): what became of each lease: `Completion`, `RobotsResult`,
  `TdmrepResult` events, and `LeaseExtend` (a page lease whose capture still waits to be durable);
  `IpDone` (key = the IP gate key) is not written (the fetcher keeps its gate); the
  job drops any that an older job left on the topic.
  Apart from discoveries so a backlog of new URLs never delays the end of a lease.
  Both topics carry the one event schema and the job reads any event type from either.
- `pages.parsed`   (key = url_fp as decimal text): `ParsedPage`.
- `crawl.status`: what the job reports about its input and its verdicts: `rejected_event` and
  `rejected_command` (key "rejected"), and `CanonicalRevised` (key = the alias page's url_fp as decimal
  text, like its pages.parsed record; decision 1820).
Between operators: `FetchRequest` (frontier → fetcher), `FetchResult` (fetcher → parse / WARC).
"""
from __future__ import annotations

import base64
import enum
from typing import Any, Literal, NotRequired, TypedDict

from udfs import compact_json

SCHEMA_VERSION = 1

# Topic names, in one place.
TOPIC_FRONTIER = "crawl.frontier"
TOPIC_OUTCOMES = "crawl.outcomes"
TOPIC_PAGES = "pages.parsed"
TOPIC_CONTROL = "crawl.control"
TOPIC_STATUS = "crawl.status"
ALL_TOPICS = (TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, TOPIC_CONTROL, TOPIC_STATUS)


class FetchStatus(str, enum.Enum):
    """What happened to one fetch, as data (StormCrawler's Status, httpx's exception map)."""

    OK = "ok"                      # a complete HTTP response (any status code)
    TIMEOUT = "timeout"            # connect, first-byte or total deadline passed
    CONN_ERROR = "conn_error"      # refused, reset, TLS or protocol failure
    DNS_ERROR = "dns_error"        # the host name did not resolve
    BLOCKED = "blocked"            # the SSRF guard refused the address before connecting
    TOO_LARGE = "too_large"        # body or decompressed body over its cap (response kept, truncated)
    TOO_SLOW = "too_slow"          # transfer speed under the minimum
    BAD_CONTENT_TYPE = "bad_content_type"  # not a type we archive/parse (headers kept, body dropped)
    ERROR = "error"                # anything else; the reason says what
    # Written by the WARC writer on a completion, never by the fetcher: the page was fetched but its
    # capture never became durable (a full disk, a staged file lost); fetched again, nothing charged (3781)
    NOT_ARCHIVED = "not_archived"
    # Written by the fetch loop, never sent: the host's address, resolved there, is another fetch subtask's
    # to gate; the frontier learns the address and leases the request again, uncharged (decision 3907)
    MISROUTED = "misrouted"
    # A robots.txt or tdmrep.json redirect whose next hop is on another server address: that hop is not
    # sent here; the host's frontier leases it under that address (the result's `hop`, decision 3909)
    HANDED_ON = "handed_on"


PRIORITY_SITEMAP = 1   # a host's sitemaps come before its links (priority 5) and redirect targets (4)

# Why the parse step stopped reading a page (a Completion's and a ParsedPage's `parse_limit`; decision 3700):
# the nesting or element cap before the tree was built (the page is published with what came before it),
# or the sandboxed extraction's CPU or memory budget, or its crash (the page is archived, not published).
PARSE_LIMITS = ("depth", "elements", "cpu", "memory", "crashed")
# The ones that say a page was built to cost its parser: they count against its host (decision 3702).
# "elements" is a size cap, like the body's, that big honest pages reach too.
HOSTILE_PARSE_LIMITS = frozenset({"depth", "cpu", "memory", "crashed"})


class UrlEntry(TypedDict):
    url: str            # normalised (udfs.urls.normalize_url)
    fp: int             # udfs.urls.url_fp(url)
    depth: int          # hops from a seed
    priority: int       # 0 (highest) .. 9
    source: str         # "seed", "link", "redirect", "sitemap", "recrawl"
    # Redirects followed to reach this URL: for a "redirect" entry the writer sets the source's
    # FetchRequest.redirect_hops + 1 (absent reads as 0, so the frontier's hop cap cannot trip).
    redirect_hops: NotRequired[int]
    # The URL in the query order the page (or Location) wrote, when sorting the query changed it:
    # the frontier asks robots.txt about both forms (decision 1807).
    written: NotRequired[str]
    # The URL is a sitemap (its host's robots.txt, an index or a redirect named it): fetched and read as
    # one, never published (decision 1812).
    sitemap: NotRequired[bool]
    # A sitemap only: the host key (udfs.urls.host_key) of another host whose robots.txt listed it
    # (sitemaps.org cross-submission): it speaks for that host's pages too, which come with its hints
    # (decision 1816). The frontier drops an entry whose value is not a host key as malformed, and reads
    # it as absent on a page or on that host's own sitemap.
    sitemap_for: NotRequired[str]
    # What a sitemap said about a page it lists, when it said it: lastmod (Unix seconds), priority
    # (0..1) and changefreq ("always" .. "never"); the recrawl schedule reads them (decision 1813).
    lastmod: NotRequired[int]
    sitemap_priority: NotRequired[float]
    changefreq: NotRequired[str]
    # The URL is the rel=canonical the page at this URL named, judged a `hint` (decision 1804): the
    # frontier remembers the page (udfs.frontier.rows.MAX_CANONICAL_ALIASES of them) until the URL is
    # fetched, and if it answers 404, 410 or is a soft 404 it revises that page's verdict on crawl.status
    # (`CanonicalRevised`). An http(s) URL on the same registrable domain, not the URL
    # itself; the frontier drops an entry with any other value as malformed.
    canonical_of: NotRequired[str]


class DiscoveredBatch(TypedDict):
    """New URLs for one host (one record per page and target host, not one per link)."""

    v: int
    type: Literal["discovered"]
    host: str
    urls: list[UrlEntry]
    # The host of the page the links were found on (decision 1806; absent for seeds, sitemaps and older
    # writers): the frontier counts the other hosts linking in for importance.
    from_host: NotRequired[str]
    # The url_fp of that page (decision 1815; absent from older writers): its host's frontier counts the
    # new URLs the page brought to its own host, the page's hub yield for the recrawl schedule.
    from_fp: NotRequired[int]
    # When that page was fetched (its done_at, Unix seconds; decision 1843; absent from older writers):
    # the frontier reads how far behind discovery it is, and brakes its releases past
    # `frontier.max_discovery_lag_s`.
    found_at: NotRequired[float]


class RenderRequest(TypedDict):
    """A fetched page the parse step picked for rendering (udfs.render_select, decision 3900), sent by the
    WARC writer to its host's frontier, which leases it as the host's next page (decision 3905). Built
    by `render_event`."""

    v: int
    type: Literal["render"]
    host: str
    url: str            # the page's normalised URL (its FetchRequest.url)
    fp: int             # udfs.urls.url_fp(url), as discovered URLs carry it
    depth: int          # the page's depth
    reason: str         # why it is rendered: one of udfs.render_select.REASONS


def render_event(host: str, url: str, fp: int, depth: int, reason: str) -> RenderRequest:
    """The `crawl.frontier` event that asks `host`'s frontier to render the page `url` for `reason`."""
    return RenderRequest(v=SCHEMA_VERSION, type="render", host=host, url=url, fp=fp, depth=depth, reason=reason)


class Completion(TypedDict):
    """The end of one lease: the fetcher's outcome for one page URL, returned to its host's frontier."""

    v: int
    type: Literal["completion"]
    host: str
    lease_id: str
    url: str
    fp: int
    fetch_status: str           # FetchStatus value
    http_status: int | None
    started_at: float           # epoch seconds
    done_at: float
    fetch_ms: float
    bytes: int
    content_hash: str | None    # "sha256:<hex>" of the payload
    simhash: int | None
    etag: str | None
    last_modified: str | None
    redirect: str | None        # normalised Location target for 3xx
    retry_after: float | None   # seconds, from Retry-After on 429/503
    ip: NotRequired[str | None]  # the server address fetched from; the frontier remembers it for the IP gate
    # The full capture a later revisit refers to (udfs.warc.RevisitTarget fields: record_id, target_uri,
    # date, payload_digest): this fetch's response record, or the one its revisit referred to.
    capture: NotRequired[dict[str, str | None] | None]
    # Dedup's verdict on the page, for the host's unique-content ratio (udfs.host_quality).
    duplicate: NotRequired[bool]        # an exact duplicate of another URL's payload
    near_duplicate: NotRequired[bool]   # within the SimHash distance of a page already seen
    soft_404: NotRequired[bool]         # the host's "not found" page served as a 200 (ProbeResult)
    parse_limit: NotRequired[str]       # the parse limit the page met, one of PARSE_LIMITS


class LeaseExtend(TypedDict):
    """The WARC writer's word that a page lease's capture is archived and its completion waits for the
    records to be durable (an object-store upload, a group fsync): the frontier pushes that lease's
    deadline to `frontier.lease_timeout_s` from when it reads this, up to `frontier.max_lease_extension_s`
    in all (decision 3783). Sent every `warc.lease_extend_every_s` while the capture waits."""

    v: int
    type: Literal["lease_extend"]
    host: str
    lease_id: str
    fp: int             # the leased URL's url_fp, as in its Completion


class PreflightResult(TypedDict):
    """What every per-host fetch outcome carries (robots.txt, tdmrep.json, the soft-404 probe): which
    lease it ends, and how the fetch went. Each kind adds its `type` and its own fields."""

    v: int
    host: str
    lease_id: str
    fetch_status: str
    http_status: int | None
    fetched_at: float
    fetch_ms: float
    ip: NotRequired[str | None]  # the server address fetched from
    # Set only when true: the answer came from another URL than the one asked for (robots.txt and
    # tdmrep.json follow redirects), so it says nothing of how the host answers missing paths (1821).
    redirected: NotRequired[bool]
    # Fetch status `handed_on` only: the redirect hop to lease next, its server address and the hops
    # followed to reach it, counted from the host's own file (decision 3909).
    hop_url: NotRequired[str]
    hop_ip: NotRequired[str]
    hops: NotRequired[int]


class RobotsResult(PreflightResult):
    """The outcome of a robots.txt fetch; the body travels so the frontier can keep the rules in state."""

    type: Literal["robots"]
    body_b64: str               # robots.txt body (capped by RobotsPolicy), base64
    retry_after: NotRequired[float | None]   # seconds, from a 429/503's Retry-After (counted from fetched_at)
    gate_key: NotRequired[str]  # written by older jobs for an IP gate between frontier and fetcher; ignored


class TdmrepResult(PreflightResult):
    """The outcome of a `/.well-known/tdmrep.json` fetch (TDMRep; decision 1930), like `RobotsResult`:
    the body (capped at OptOutPolicy.max_tdmrep_bytes) travels so the frontier can keep it in state."""

    type: Literal["tdmrep"]
    body_b64: str
    retry_after: NotRequired[float | None]   # seconds, from a 429/503's Retry-After (counted from fetched_at)


class ProbeResult(PreflightResult):
    """The outcome of a host's soft-404 probe (a random page-like path, decision 1844): what the
    frontier keeps to compare the host's pages with. The page itself is neither archived nor published."""

    type: Literal["probe"]
    bytes: int                  # body length
    simhash: int | None         # of the answer's main text (complete 200 HTML answers)
    title: str | None
    retry_after: float | None   # seconds, from a 429/503's Retry-After


class IpDone(TypedDict):
    """The end of one fetch for an IP gate between the frontier and the fetcher, which the job does not
    have: the fetcher keeps the per-address limit itself. No job writes it; it stays in the contract
    so a job restored from an older one reads the ones left on crawl.outcomes (and drops
    them: they never reach the frontier)."""

    v: int
    type: Literal["ip_done"]
    host: str
    gate_key: str
    lease_id: str
    abandoned: NotRequired[bool]   # the crawler cut the fetch short: the gate keeps the address busy a little


class DomainHosts(TypedDict):
    """The domain census's answer to one frontier host (decision 1811, udfs.census): the host's
    registrable domain has `hosts` hosts, so its share of the domain budget is 1 / hosts."""

    v: int
    type: Literal["domain_hosts"]
    host: str
    hosts: int


class FetchRequest(TypedDict):
    host: str
    url: str
    fp: int
    kind: Literal["page", "robots", "tdmrep", "probe"]
    lease_id: str
    depth: int
    attempt: int
    etag: NotRequired[str | None]
    last_modified: NotRequired[str | None]
    redirect_hops: NotRequired[int]   # pages only: redirects followed to reach `url` (UrlEntry.redirect_hops)
    ip: NotRequired[str | None]   # the host's pinned or last known address (None: unknown); the IP gate's key
    # When the frontier's lease of this request expires (epoch seconds): the fetcher skips a request that
    # could no longer end before it (udfs.ip_gate.too_late_to_start).
    lease_deadline: NotRequired[float]
    # Recrawls: the previous capture (Completion.capture); a 304 is archived as a revisit of it.
    revisit_of: NotRequired[dict[str, str | None] | None]
    # Pages only, set only when non-empty: the configured AI agents (OptOutPolicy.ai_agents) the host's
    # robots.txt disallows for `url`; the parse step turns them into the page's opt-out reasons.
    ai_disallowed: NotRequired[list[str]]
    # Pages only, set only when the host's tdmrep.json has a rule matching `url`: its tdm-reservation
    # (0 or 1); the parse step weighs it as the TDMRep file signal.
    tdm_file: NotRequired[int]
    # Pages only, set only when the host's soft-404 probe was answered 200: that answer as a
    # udfs.soft404.ProbeRow row; the parse step marks a page like it as a soft 404.
    soft404_probe: NotRequired[str]
    # Pages only, set only for a sitemap (UrlEntry.sitemap): parse reads the answer as a sitemap and the
    # writer sends on the URLs it lists instead of publishing it.
    sitemap: NotRequired[bool]
    # Sitemaps only, set only when another host's robots.txt listed it (UrlEntry.sitemap_for): parse
    # follows that host's pages with the sitemap's hints too, and the writer passes it on to an index's
    # sitemaps and a redirected sitemap's target.
    sitemap_for: NotRequired[str]
    # Ordinary page leases only, set only when an operator gave the host a render mode other than "auto"
    # (`crawler host H --render`): "always" or "never", which the parse step's selection honours.
    render_mode: NotRequired[str]
    # Render leases only (kind "page", decision 3905): why the page is rendered (RenderRequest.reason).
    # Its presence is what makes the lease a render: fetch the page, then render it.
    render: NotRequired[str]
    # Render leases only, set only when the host has rules (its robots.txt answered 2xx): that robots.txt
    # body as the frontier holds it (base64 text), to judge the render's own sub-resource requests with.
    # Absent: the host allows everything (robots.txt answered 4xx).
    robots_b64: NotRequired[str]
    # Render leases only: the host's politeness gap in seconds as the frontier keeps it between the host's
    # requests (udfs.politeness.fetch_gap of its Crawl-delay, operator rate limit and backoff), to pace
    # the render's sub-resource requests at.
    delay_s: NotRequired[float]
    # robots.txt and tdmrep.json leases only, set when `url` is a redirect hop to another server address
    # that an earlier lease of the host handed on (decision 3909): the redirects already followed.
    hops: NotRequired[int]


class PreflightHop(TypedDict):
    """A robots.txt or tdmrep.json redirect hop to another server address (decision 3909)."""

    url: str    # the hop's target
    ip: str     # its server address, which the hop's lease is gated and routed by
    hops: int   # redirects followed to reach it, from the host's own file


class FetchResult(TypedDict):
    request: FetchRequest
    url: NotRequired[str]       # the URL of the response (differs from request.url after robots redirects)
    fetch_status: str
    reason: str                 # human-readable detail for failures ("" when ok)
    http_status: int | None
    http_reason: str
    http_version: NotRequired[str]   # "1.1" / "1.0", for the WARC status line
    headers: list[tuple[str, str]]   # as received, in order
    request_headers: NotRequired[list[tuple[str, str]]]  # as sent, for the WARC request record
    body: bytes                 # decoded transfer (de-chunked, decompressed), capped
    ip: str | None
    started_at: float
    done_at: float
    truncated: str | None       # WARC-Truncated reason ("length", "time") when capped
    hop: NotRequired[PreflightHop]  # fetch status `handed_on` only: the hop the frontier leases next


def response_url(result: FetchResult) -> str:
    """The URL the response came from: `url` when the fetch followed robots redirects, else the request's."""
    return result.get("url") or result["request"]["url"]


class ParsedPage(TypedDict):
    v: int
    url: str
    url_fp: int
    final_url: str
    fetched_at: float
    http_status: int
    content_type: str | None
    content_hash: str
    simhash: int
    duplicate_of: str | None
    near_duplicate_of: str | None
    title: str | None
    lang: str | None
    text: str
    links: list[str]
    warc_path: str
    warc_offset: int
    warc_length: int
    optout: NotRequired[dict[str, Any]]   # {"reserved": bool, "reason": str} (udfs.optout; decision 1203)
    canonical: NotRequired[dict[str, str]]   # {"url", "trust", "reason"} (udfs.canonical)
    # "depth" or "elements": text and links are those of the page's text before that parse cap
    parse_limit: NotRequired[str]
    # Why the rendering tier rendered the page (a reason of udfs.render_select): title, text and links
    # are those of the DOM its scripts built; the WARC file holds that DOM after the response
    rendered: NotRequired[str]


class CanonicalRevised(TypedDict):
    """A `crawl.status` record: the `hint` canonical a page named in its pages.parsed record turned out
    broken when fetched, so that page's verdict becomes `ignored`. A
    consumer folding aliases into canonicals applies it to the page `url` (the same key as its
    pages.parsed record)."""

    v: int
    type: Literal["canonical_revised"]
    url: str            # the page that named the canonical (its pages.parsed `url`)
    canonical: str      # the canonical it named
    trust: Literal["ignored"]
    reason: str         # "canonical answered 404", "... 410", "... 404 or 410", "canonical is a soft 404"


class ContractError(ValueError):
    """A record on a topic does not match its contract; the message says which field and why."""


_FRONTIER_TYPES = {"discovered", "completion", "robots", "tdmrep", "probe", "ip_done", "domain_hosts",
                   "lease_extend", "render"}


def encode(record: dict[str, Any]) -> bytes:
    """Serialise a record for Kafka (compact JSON, UTF-8)."""
    return compact_json.dumps_bytes(record)


def json_object(raw: bytes | str, what: str = "record") -> dict[str, Any]:
    """One JSON object from a topic value or request body; raises ContractError saying what is wrong
    (not JSON, nested too deep, or another JSON type), never another exception."""
    try:
        value = compact_json.loads(raw)
    except (ValueError, RecursionError) as exc:   # UnicodeDecodeError is a ValueError
        raise ContractError(f"{what}: not JSON ({str(exc)[:120]})") from None
    if not isinstance(value, dict):
        raise ContractError(f"{what}: must be a JSON object, got {type(value).__name__}")
    return value


def decode_frontier_event(raw: bytes | str) -> dict[str, Any]:
    """Parse and check one `crawl.frontier` or `crawl.outcomes` value; raises ContractError with the
    reason when malformed."""
    event = json_object(raw, "event")
    version = event.get("v")
    if version != SCHEMA_VERSION:
        raise ContractError(f"unsupported schema version {version!r} (this release reads {SCHEMA_VERSION})")
    kind = event.get("type")
    if kind not in _FRONTIER_TYPES:
        raise ContractError(f"unknown event type {kind!r}; expected one of {sorted(_FRONTIER_TYPES)}")
    if not isinstance(event.get("host"), str) or not event["host"]:
        raise ContractError("event has no host")
    if kind == "discovered" and not isinstance(event.get("urls"), list):
        raise ContractError("discovered event has no urls list")
    if kind == "ip_done" and not (isinstance(event.get("gate_key"), str) and isinstance(event.get("lease_id"), str)):
        raise ContractError("ip_done event needs a gate_key and a lease_id")
    if kind == "tdmrep" and not (isinstance(event.get("lease_id"), str) and isinstance(event.get("body_b64"), str)):
        raise ContractError("tdmrep event needs a lease_id and a body_b64 text")
    if kind == "probe" and not isinstance(event.get("lease_id"), str):
        raise ContractError("probe event needs a lease_id")
    if kind == "lease_extend" and not is_lease_extend(event):
        raise ContractError("lease_extend event needs a lease_id and a url_fp (an integer from 0 to 2**64 - 1)")
    if kind == "render":
        _check_render(event)
    hosts = event.get("hosts")
    if kind == "domain_hosts" and not (isinstance(hosts, int) and not isinstance(hosts, bool) and hosts >= 1):
        raise ContractError(f"domain_hosts event needs a host count >= 1, got {hosts!r}")
    return event


def _check_render(event: dict[str, Any]) -> None:
    """A `render` event's fields (RenderRequest); raises ContractError naming the first bad one."""
    url, fp, depth, reason = event.get("url"), event.get("fp"), event.get("depth"), event.get("reason")
    if not isinstance(url, str) or not url:
        raise ContractError(f"render event needs a url text, got {str(url)[:80]!r}")
    if not (isinstance(fp, int) and not isinstance(fp, bool) and 0 <= fp < 1 << 64):
        raise ContractError(f"render event needs an fp (an integer from 0 to 2**64 - 1), got {str(fp)[:80]!r}")
    if not (isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0):
        raise ContractError(f"render event needs a depth (an integer >= 0), got {str(depth)[:80]!r}")
    if not isinstance(reason, str) or not reason:
        raise ContractError(f"render event needs a reason text, got {str(reason)[:80]!r}")


def is_lease_extend(event: dict[str, Any]) -> bool:
    """Whether a `lease_extend` event has what the frontier reads: a non-empty lease id and a u64 fp."""
    lease_id, fp = event.get("lease_id"), event.get("fp")
    return isinstance(lease_id, str) and bool(lease_id) and isinstance(fp, int) and not isinstance(fp, bool) \
        and 0 <= fp < 1 << 64


def b64(body: bytes) -> str:
    return base64.b64encode(body).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=False)
