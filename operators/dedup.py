"""Content dedup beside the page's way from parse to the WARC writer: exact duplicates, then near-duplicates.

Pipeline position (docs/architecture.md §1): parse → **probe** → **exact** (keyed by content_hash) →
**near** (k + 1 operators, each keyed by one SimHash block) → verdict → WARC writer, which pairs it
with the page (decision 1616). Every decision is in `udfs.dedup`; these operators keep the state and
count (metric group `dedup`).

- A `Probe` is what dedup needs of a page (fingerprints, the owner row it would store, its URL): a few
  hundred bytes where the page is ~180 KB. The page goes from parse to the writer directly; moving it
  through the five thread-mode operators cost ~3.5 ms of the TaskManager per page (docs/perf/crawl-throughput-history.md).
- `ExactDedupFunction`: one owner row per payload (decision 1300). Its verdict tells the writer to
  write a response (named `response_id`) or an identical-payload revisit of the owner.
- `BandFunction`: one bounded list of fingerprints per band key (decision 1301). The probe travels
  through the k + 1 band operators one after another, each merging its closest match into the
  verdict (decision 1302).
The probe map runs in `process` mode beside parse, the keyed operators in `thread` mode (decision 1303);
jobs/stages.py adds them to the graph.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, NotRequired, TypedDict

from pyflink.common import Types
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from operators.cpu import thread_cpu_level
from operators.levels import Levels
from udfs.page_facts import ParsedBundle, payload_digest, payload_length
from udfs.dedup import (DedupPolicy, DedupVerdict, OwnerRow, better, closest, decide_exact, decode_band, decode_owner,
                        encode_band, encode_owner, exact_candidate, insert, probe_keys, response_record_id,
                        unique_verdict)
from udfs.records import response_url
from udfs.warc import WarcPolicy, format_date

BUNDLE_TYPE = Types.PICKLED_BYTE_ARRAY()


class Probe(TypedDict):
    """What dedup needs of one page bundle, and the verdict it adds; crosses Flink edges pickled."""

    key: str                   # the bundle's join key (`join_key`), to pair the verdict with the page
    content_hash: str | None
    simhash: int | None
    owner: OwnerRow | None     # the owner row this capture would store; None: not an exact candidate
    url: str
    url_fp: int
    host: str
    dedup: NotRequired[DedupVerdict]


def join_key(bundle: ParsedBundle) -> str:
    """The key a page and its verdict meet under at the writer: the fetch's lease id (one per fetch)."""
    return str(bundle["result"]["request"]["lease_id"])


def _is_exact_candidate(bundle: ParsedBundle, policy: DedupPolicy) -> bool:
    result = bundle["result"]
    return bundle["content_hash"] is not None and exact_candidate(
        result["http_status"], result["fetch_status"], result["truncated"], payload_length(bundle), policy)


def needs_dedup(bundle: ParsedBundle, policy: DedupPolicy) -> bool:
    """Whether dedup judges this page (so the writer waits for its verdict)."""
    return bundle["simhash"] is not None or _is_exact_candidate(bundle, policy)


def _needs_probe(probe: Probe) -> bool:
    verdict = probe.get("dedup")
    return probe["simhash"] is not None and verdict is not None and verdict["revisit_of"] is None


def owner_capture(bundle: ParsedBundle, warc_policy: WarcPolicy) -> OwnerRow:
    """The owner row this capture would store: its URL, WARC-Date and payload digest as the writer
    writes them under `warc_policy`, and its derived response record id."""
    result = bundle["result"]
    request = result["request"]
    url = response_url(result)
    return OwnerRow(url=url, url_fp=request["fp"], warc_date=format_date(result["done_at"], warc_policy.date_precision),
                    payload_digest=payload_digest(bundle, warc_policy.digest_algorithm),
                    record_id=response_record_id(url, result["done_at"], request["lease_id"]),
                    captured_at=result["done_at"])


def probe_of(bundle: ParsedBundle, policy: DedupPolicy, warc_policy: WarcPolicy) -> Probe | None:
    """The page's probe, or None when dedup does not judge it (no SimHash, not an exact candidate)."""
    if not needs_dedup(bundle, policy):
        return None
    result = bundle["result"]
    request = result["request"]
    return Probe(key=join_key(bundle), content_hash=bundle["content_hash"], simhash=bundle["simhash"],
                 owner=owner_capture(bundle, warc_policy) if _is_exact_candidate(bundle, policy) else None,
                 url=response_url(result), url_fp=request["fp"], host=request["host"])


def unpaired_verdict(bundle: ParsedBundle) -> DedupVerdict:
    """The verdict a page gets when its own never reached the writer: unique, with the response record
    id the exact operator may have stored for it, so a revisit that refers to it finds it."""
    result = bundle["result"]
    url = response_url(result)
    return unique_verdict(response_record_id(url, result["done_at"], result["request"]["lease_id"]))


class ExactDedupFunction(KeyedProcessFunction):
    """Keyed by content_hash: the first capture owns the payload, later ones become revisits.

    Counts `exact_duplicates` (another URL owns the payload), `unchanged` (the same URL again) and
    `unique` for pages that go no further (no SimHash to probe).
    """

    def __init__(self, policy: DedupPolicy) -> None:
        self._policy = policy
        self._owner: Any = None
        self._counters: dict[str, Any] = {}
        self._cpu: Levels | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        # The expiry check is explicit (udfs.dedup.decide_exact); a timer at the row's expiry reclaims
        # rows nobody reads again. Not Flink's state TTL: building a StateTtlConfig in a thread-mode
        # worker needs a Py4J gateway, which a TaskManager does not have (it failed on the cluster),
        # and TTL returned expired values in process mode (docs/architecture.md §4).
        self._owner = runtime_context.get_state(ValueStateDescriptor("owner", Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("dedup")
        self._counters = {name: group.counter(name) for name in ("exact_duplicates", "unchanged", "unique")}
        self._cpu = thread_cpu_level(group)

    def process_element(self, value: Probe, ctx: KeyedProcessFunction.Context) -> Iterator[Probe]:
        if self._cpu is not None:
            self._cpu.refresh(time.monotonic())
        capture = value["owner"]
        if capture is None:
            value["dedup"] = unique_verdict(None)   # e.g. a truncated page: probed for near-duplicates only
        else:
            verdict, keep = decide_exact(decode_owner(self._owner.value()), capture, self._policy)
            if keep is capture:
                self._owner.update(encode_owner(keep))
                ctx.timer_service().register_processing_time_timer(
                    int((keep.captured_at + self._policy.owner_ttl_s) * 1000) + 1)
            value["dedup"] = verdict
            if verdict["revisit_of"] is not None:
                self._counters["exact_duplicates" if verdict["duplicate_of"] else "unchanged"].inc()
        if not _needs_probe(value) and value["dedup"]["revisit_of"] is None:
            self._counters["unique"].inc()
        yield value


    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Probe]:
        """Drop the owner row once it has expired (a newer owner's row has a later timer of its own)."""
        owner = decode_owner(self._owner.value())
        if owner is not None and (owner.captured_at + self._policy.owner_ttl_s) * 1000 < timestamp:
            self._owner.clear()
        return iter(())


class BandFunction(KeyedProcessFunction):
    """Keyed by band key `index` of the page's SimHash: answers with the closest stored fingerprint
    within k (merged into the verdict), then stores the page's own, evicting the oldest beyond capacity.

    Counts `probes` and `band_evictions`; the last band also counts the final `near_duplicates`
    and `unique` verdicts.
    """

    def __init__(self, policy: DedupPolicy, last: bool) -> None:
        self._policy = policy
        self._last = last
        self._band: Any = None
        self._counters: dict[str, Any] = {}
        self._cpu: Levels | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self._band = runtime_context.get_state(ValueStateDescriptor("band", Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("dedup")
        names = ("probes", "band_evictions") + (("near_duplicates", "unique") if self._last else ())
        self._counters = {name: group.counter(name) for name in names}
        self._cpu = thread_cpu_level(group)

    def process_element(self, value: Probe, ctx: KeyedProcessFunction.Context) -> Iterator[Probe]:
        if self._cpu is not None:
            self._cpu.refresh(time.monotonic())
        simhash, verdict = value["simhash"], value["dedup"]
        assert simhash is not None
        url, fp, host = value["url"], value["url_fp"], value["host"]
        entries = decode_band(self._band.value())
        verdict["near"] = better(verdict["near"], closest(entries, simhash, fp, host, self._policy.max_hamming), host)
        entries, evicted = insert(entries, (simhash, url, fp, host), self._policy.band_capacity)
        self._band.update(encode_band(entries))
        self._counters["probes"].inc()
        if evicted:
            self._counters["band_evictions"].inc(evicted)
        if self._last:
            self._counters["near_duplicates" if verdict["near"] is not None else "unique"].inc()
        yield value


def probes_of(policy: DedupPolicy, warc_policy: WarcPolicy) -> Callable[[ParsedBundle], list[Probe]]:
    """The probe map's function: a bundle → its `Probe`, none when dedup does not judge it."""
    def probes(bundle: ParsedBundle) -> list[Probe]:
        probe = probe_of(bundle, policy, warc_policy)
        return [probe] if probe is not None else []
    return probes


def payload_key(probe: Probe) -> str | None:
    """The exact operator's key: one owner row per payload."""
    return probe["content_hash"]


def settled(probe: Probe) -> list[Probe]:
    """The probe if the exact verdict is final (nothing for the bands to judge)."""
    return [] if _needs_probe(probe) else [probe]


def to_bands(probe: Probe) -> list[Probe]:
    """The probe if the bands still judge it (a SimHash, no revisit)."""
    return [probe] if _needs_probe(probe) else []


def band_count(policy: DedupPolicy) -> int:
    """How many band operators a probe goes through: k + 1 blocks, so a match within k shares one."""
    return policy.max_hamming + 1


def band_key(index: int, policy: DedupPolicy) -> Callable[[Probe], int]:
    """The key of band operator `index`: that block of the probe's SimHash."""
    def key(probe: Probe) -> int:
        assert probe["simhash"] is not None
        return probe_keys(probe["simhash"], policy)[index]
    return key


def verdict_key(probe: Probe) -> str:
    """The key a judged probe reaches the writer under: its page's `join_key`."""
    return probe["key"]
