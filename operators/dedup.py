"""Content dedup between parse and the WARC writer: exact duplicates, then near-duplicates.

Pipeline position (ARCHITECTURE.md §1): parse → **exact** (keyed by content_hash) → **near**
(k + 1 operators, each keyed by one SimHash block) → WARC writer. Every decision is in
`udfs.dedup`; these operators keep the state and count (metric group `dedup`).

- `ExactDedupFunction`: one owner row per payload (decision 1300). Its verdict tells the writer to
  write a response (named `response_id`) or an identical-payload revisit of the owner.
- `BandFunction`: one bounded list of fingerprints per band key (decision 1301). The page itself
  travels through the k + 1 band operators one after another, each merging its closest match into
  the verdict, so no operator holds page bodies in state and no join is needed (decision 1302).
The keyed operators run in `thread` mode (decision 1303); `add_dedup` switches modes around them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import DataStream
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from operators.parse import ParsedBundle
from udfs.dedup import (DedupPolicy, OwnerRow, better, closest, decide_exact, decode_band, decode_owner, encode_band,
                        encode_owner, exact_candidate, insert, probe_keys, response_record_id, unique_verdict)
from udfs.warc import WarcPolicy, digest, format_date

BUNDLE_TYPE = Types.PICKLED_BYTE_ARRAY()


def _is_exact_candidate(bundle: ParsedBundle, policy: DedupPolicy) -> bool:
    result = bundle["result"]
    return bundle["content_hash"] is not None and exact_candidate(
        result["http_status"], result["fetch_status"], result["truncated"], len(result["body"]), policy)


def _needs_dedup(bundle: ParsedBundle, policy: DedupPolicy) -> bool:
    return bundle["simhash"] is not None or _is_exact_candidate(bundle, policy)


def _needs_probe(bundle: ParsedBundle) -> bool:
    verdict = bundle.get("dedup")
    return bundle["simhash"] is not None and verdict is not None and verdict["revisit_of"] is None


def owner_capture(bundle: ParsedBundle, warc_policy: WarcPolicy) -> OwnerRow:
    """The owner row this capture would store: its URL, WARC-Date and payload digest as the writer
    writes them under `warc_policy`, and its derived response record id."""
    result = bundle["result"]
    request = result["request"]
    url = result.get("url") or request["url"]
    return OwnerRow(url=url, url_fp=request["fp"], warc_date=format_date(result["done_at"], warc_policy.date_precision),
                    payload_digest=digest(result["body"], warc_policy.digest_algorithm),
                    record_id=response_record_id(url, result["done_at"], request["lease_id"]),
                    captured_at=result["done_at"])


class ExactDedupFunction(KeyedProcessFunction):
    """Keyed by content_hash: the first capture owns the payload, later ones become revisits.

    Counts `exact_duplicates` (another URL owns the payload), `unchanged` (the same URL again) and
    `unique` for pages that go no further (no SimHash to probe).
    """

    def __init__(self, policy: DedupPolicy, warc_policy: WarcPolicy) -> None:
        self._policy = policy
        self._warc_policy = warc_policy
        self._owner: Any = None
        self._counters: dict[str, Any] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        # The expiry check is explicit (udfs.dedup.decide_exact); a timer at the row's expiry reclaims
        # rows nobody reads again. Not Flink's state TTL: building a StateTtlConfig in a thread-mode
        # worker needs a Py4J gateway, which a TaskManager does not have (it failed on the cluster),
        # and TTL returned expired values in process mode (ARCHITECTURE.md §4).
        self._owner = runtime_context.get_state(ValueStateDescriptor("owner", Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("dedup")
        self._counters = {name: group.counter(name) for name in ("exact_duplicates", "unchanged", "unique")}

    def process_element(self, value: ParsedBundle, ctx: KeyedProcessFunction.Context) -> Iterator[ParsedBundle]:
        if not _is_exact_candidate(value, self._policy):
            value["dedup"] = unique_verdict(None)   # e.g. a truncated page: probed for near-duplicates only
        else:
            capture = owner_capture(value, self._warc_policy)
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


    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[ParsedBundle]:
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

    def open(self, runtime_context: RuntimeContext) -> None:
        self._band = runtime_context.get_state(ValueStateDescriptor("band", Types.STRING()))
        group = runtime_context.get_metrics_group().add_group("dedup")
        names = ("probes", "band_evictions") + (("near_duplicates", "unique") if self._last else ())
        self._counters = {name: group.counter(name) for name in names}

    def process_element(self, value: ParsedBundle, ctx: KeyedProcessFunction.Context) -> Iterator[ParsedBundle]:
        simhash, verdict = value["simhash"], value["dedup"]
        assert simhash is not None
        result = value["result"]
        request = result["request"]
        url, fp, host = result.get("url") or request["url"], request["fp"], request["host"]
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


def _band_key(index: int, policy: DedupPolicy) -> Callable[[ParsedBundle], int]:
    def key(bundle: ParsedBundle) -> int:
        assert bundle["simhash"] is not None
        return probe_keys(bundle["simhash"], policy)[index]
    return key


def add_dedup(parsed: DataStream, policy: DedupPolicy, warc_policy: WarcPolicy,
              set_mode: Callable[[str], None]) -> DataStream:
    """Attach exact and near-duplicate dedup to a stream of ParsedBundles; every bundle comes out once,
    those dedup judged with a `dedup` verdict. Decisions 1300-1303.

    Call with `process` mode in force (the routing maps fuse into parse); the keyed operators are
    added in `thread` mode through `set_mode`, and `thread` is left in force on return.
    """
    # flat_map, not filter: PyFlink fuses chained Python functions and keeps one uid of them.
    judged = (parsed.flat_map(lambda b: [b] if _needs_dedup(b, policy) else [], output_type=BUNDLE_TYPE)
              .uid("dedup-route").name("dedup route"))
    passed = (parsed.flat_map(lambda b: [] if _needs_dedup(b, policy) else [b], output_type=BUNDLE_TYPE)
              .uid("dedup-bypass").name("dedup bypass"))
    # key_by adds a Python key-extracting map: it is added in the mode of the map it fuses with.
    by_payload = judged.key_by(lambda b: b["content_hash"], key_type=Types.STRING())
    set_mode("thread")
    exact = (by_payload.process(ExactDedupFunction(policy, warc_policy), output_type=BUNDLE_TYPE)
             .uid("dedup-exact").name("dedup exact"))
    settled = (exact.flat_map(lambda b: [] if _needs_probe(b) else [b], output_type=BUNDLE_TYPE)
               .uid("dedup-settled").name("dedup settled"))
    probing = (exact.flat_map(lambda b: [b] if _needs_probe(b) else [], output_type=BUNDLE_TYPE)
               .uid("dedup-to-bands").name("dedup to bands"))
    bands = policy.max_hamming + 1
    for index in range(bands):
        # The uid names k: another k cuts other blocks, so a changed k starts from empty bands.
        probing = (probing.key_by(_band_key(index, policy), key_type=Types.LONG())
                   .process(BandFunction(policy, last=index == bands - 1), output_type=BUNDLE_TYPE)
                   .uid(f"dedup-band-{index}-of-{bands}").name(f"dedup band {index} of {bands}"))
    return passed.union(settled, probing)
