"""The stages of the crawl job's page path, each added with its operators' uids, names, widths and Python
execution modes; `jobs.crawl.build_pipeline` chains them (docs/architecture.md §1):

    requests ─► fetch ─┬─► preflight_events ─────────────────────► (topic, key, value)
                       └─► parse ─┬── pages ──────► warc_writer ─► (topic, key, value)
                                  └─► dedup_verdicts ────┘

Each stage states the mode its operators run in with `python_mode`, so none depends on the mode
another left behind: fetch, preflight events, parse and the writer run in `process` mode, in Python
workers (blocking I/O, their own threads and child processes); dedup's keyed operators in `thread` mode
(decision 1303). PyFlink fuses consecutive Python functions into one operator that keeps only one of
their uids (a hash collision when the graph branches): hence `flat_map` rather than filter + map, and
an unchained writer.
"""
from __future__ import annotations

from collections.abc import Callable

from pyflink.common import Types
from pyflink.datastream import DataStream

from operators.dedup import (BUNDLE_TYPE, BandFunction, ExactDedupFunction, Probe, band_count, band_key, join_key,
                             payload_key, probes_of, settled, to_bands, verdict_key)
from operators.fetch import FETCH_RESULT_TYPE, FetchFunction
from operators.parse import ParseFunction, is_probe, is_robots, is_tdmrep, probe_outputs, robots_output, tdmrep_outputs
from operators.python_mode import python_mode
from operators.warc_files import WarcFileSettings
from operators.warc_writer import EVENT_TYPE as TRIPLE_TYPE
from operators.warc_writer import WarcWriterFunction
from udfs.dedup import DedupPolicy
from udfs.ip_gate import DEFAULT_IP_GATE_POLICY, IpGatePolicy, gate_key
from udfs.links import DEFAULT_POLICY as DEFAULT_EXTRACT_POLICY
from udfs.links import ExtractPolicy
from udfs.netguard import DEFAULT_USER_AGENT, FetchPolicy
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy
from udfs.page_facts import ParsedBundle
from udfs.recent import DEFAULT_DISCOVERY_POLICY, DiscoveryPolicy
from udfs.records import FetchResult
from udfs.render_policy import RenderPolicy
from udfs.sitemaps import DEFAULT_SITEMAP_POLICY, SitemapPolicy
from udfs.soft404 import Soft404Policy
from udfs.storage import StoragePolicy
from udfs.warc import WarcPolicy


def fetch(requests: DataStream, policy: FetchPolicy, capacity: int,
          gate: IpGatePolicy = DEFAULT_IP_GATE_POLICY, parallelism: int | None = None,
          render: RenderPolicy | None = None) -> DataStream:
    """FetchRequests → FetchResults, keyed by gate key so that each server address has one owner, which
    keeps its limit (decision 1612) and runs its hosts' render leases with an enabled `render` policy
    (decision 3903). `parallelism` None: the environment's."""
    with python_mode(requests.get_execution_environment(), "process"):
        # The uid names the address-keyed fetcher's state in savepoints, so it must not change. A savepoint
        # that holds operators this graph lacks ("fetch", "ip-gate") restores with --allowNonRestoredState.
        fetched = (requests.key_by(gate_key, key_type=Types.STRING())
                   .process(FetchFunction(policy, capacity, gate, render=render), output_type=FETCH_RESULT_TYPE)
                   .uid("fetch-by-address").name("fetch"))
        if parallelism is not None:
            fetched = fetched.set_parallelism(parallelism)
    return fetched


def preflight_events(fetched: DataStream, policy: FetchPolicy, optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY,
                     extract: ExtractPolicy = DEFAULT_EXTRACT_POLICY, parallelism: int | None = None) -> DataStream:
    """The crawl.outcomes events of robots.txt, tdmrep.json and soft-404 probe results; pages give none.
    Give the fetcher's `parallelism` when it differs from the environment's: the filter then runs in
    each fetch subtask's worker rather than behind a shuffle of every fetch result, page bodies and all."""
    with python_mode(fetched.get_execution_environment(), "process"):
        events = (fetched.flat_map(_preflight_outputs(policy.robots_max_bytes, optout.max_tdmrep_bytes, extract),
                                   output_type=TRIPLE_TYPE)
                  .uid("robots-events").name("robots events"))
        if parallelism is not None:
            events = events.set_parallelism(parallelism)
    return events


def _preflight_outputs(robots_max_bytes: int, tdmrep_max_bytes: int,
                       extract: ExtractPolicy) -> Callable[[FetchResult], list[tuple[str, str, bytes]]]:
    def outputs(result: FetchResult) -> list[tuple[str, str, bytes]]:
        if is_robots(result):
            return [robots_output(result, robots_max_bytes)]
        if is_tdmrep(result):
            return tdmrep_outputs(result, tdmrep_max_bytes)
        if is_probe(result):
            return probe_outputs(result, extract)
        return []
    return outputs


def parse(fetched: DataStream, extract: ExtractPolicy = DEFAULT_EXTRACT_POLICY,
          optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY, soft404: Soft404Policy | None = None,
          sitemaps: SitemapPolicy = DEFAULT_SITEMAP_POLICY, warc: WarcPolicy = WarcPolicy(),
          slot_group: str = "", parallelism: int | None = None, render: RenderPolicy | None = None) -> DataStream:
    """FetchResults → ParsedBundles of the pages. With a `soft404` policy, parse compares each page that
    carries its host's probe answer with it (decision 1844); None: no checks. With an enabled `render`
    policy, parse picks the pages to render and reads rendered ones from their DOM (decision 3903). `sitemaps` limits how it
    reads the answers of sitemap leases (decision 1812). `slot_group` "": the fetchers' slots;
    `parallelism` None: the environment's."""
    with python_mode(fetched.get_execution_environment(), "process"):
        pages = (fetched.flat_map(ParseFunction(extract, optout, soft404, sitemaps, warc, render),
                                  output_type=FETCH_RESULT_TYPE)
                 .uid("parse").name("parse"))
        if slot_group:
            pages = pages.slot_sharing_group(slot_group)   # its own Python worker (decision 1808)
        if parallelism is not None:
            pages = pages.set_parallelism(parallelism)     # a worker per subtask (decision 1830)
    return pages


def dedup_verdicts(pages: DataStream, policy: DedupPolicy = DedupPolicy(), warc: WarcPolicy = WarcPolicy(),
                   parse_parallelism: int | None = None, state_mode: str = "thread") -> DataStream:
    """The dedup verdicts of the pages, keyed by `join_key` for the writer to pair each with its page
    (decisions 1300-1303); an empty stream with dedup disabled. Give `parse_parallelism` when
    parse's differs from the environment's: the probe map then runs beside each parse subtask rather
    than behind a shuffle of whole pages. `state_mode` is the mode of the keyed dedup operators:
    `thread`; the dedup benchmark measures `process` beside it."""
    env = pages.get_execution_environment()
    if not policy.enabled:
        with python_mode(env, "process"):
            none = pages.flat_map(_no_verdicts, output_type=BUNDLE_TYPE).uid("no-dedup").name("no dedup")
            if parse_parallelism is not None:
                none = none.set_parallelism(parse_parallelism)
            return none.key_by(verdict_key, key_type=Types.STRING())
    # The probe map fuses into parse; `key_by` adds a Python key map in the mode in force, so the one
    # by payload fuses with the probe map and the one by join key with the last band operator.
    with python_mode(env, "process"):
        probes = pages.flat_map(probes_of(policy, warc), output_type=BUNDLE_TYPE).uid("dedup-probe").name("dedup probe")
        if parse_parallelism is not None:
            probes = probes.set_parallelism(parse_parallelism)
        by_payload = probes.key_by(payload_key, key_type=Types.STRING())
    with python_mode(env, state_mode):
        exact = (by_payload.process(ExactDedupFunction(policy), output_type=BUNDLE_TYPE)
                 .uid("dedup-exact").name("dedup exact"))
        done = exact.flat_map(settled, output_type=BUNDLE_TYPE).uid("dedup-settled").name("dedup settled")
        probing = exact.flat_map(to_bands, output_type=BUNDLE_TYPE).uid("dedup-to-bands").name("dedup to bands")
        bands = band_count(policy)
        for index in range(bands):
            # The uid names k: another k cuts other blocks, so a changed k starts from empty bands.
            probing = (probing.key_by(band_key(index, policy), key_type=Types.LONG())
                       .process(BandFunction(policy, last=index == bands - 1), output_type=BUNDLE_TYPE)
                       .uid(f"dedup-band-{index}-of-{bands}").name(f"dedup band {index} of {bands}"))
        return done.union(probing).key_by(verdict_key, key_type=Types.STRING())


def _no_verdicts(bundle: ParsedBundle) -> list[Probe]:
    return []


def warc_writer(pages: DataStream, verdicts: DataStream, root: str, settings: WarcFileSettings = WarcFileSettings(),
                warc: WarcPolicy = WarcPolicy(), storage: StoragePolicy = StoragePolicy(),
                discovery: DiscoveryPolicy = DEFAULT_DISCOVERY_POLICY, dedup: DedupPolicy = DedupPolicy(),
                slot_group: str = "", user_agent: str = DEFAULT_USER_AGENT) -> DataStream:
    """The WARC writer, pages keyed by `join_key` and paired with their `verdicts` (decision 1616): the
    (topic, key, value) records of each durable capture, its page (pages.parsed), links
    (crawl.frontier) and completion (crawl.outcomes). `slot_group` "": the fetchers' slots. Each file's
    warcinfo names `user_agent`, the User-Agent of every request."""
    writer = WarcWriterFunction(root, settings, warc, user_agent=user_agent, storage=storage, discovery=discovery,
                                dedup=dedup if dedup.enabled else None)
    with python_mode(pages.get_execution_environment(), "process"):
        # The uid names the keyed two-input writer's state in savepoints, so it must not change.
        events = (pages.key_by(join_key, key_type=Types.STRING())
                  .connect(verdicts)
                  .process(writer, output_type=TRIPLE_TYPE)
                  .uid("warc-writer-joined").name("warc writer").disable_chaining())
        if slot_group:
            events = events.slot_sharing_group(slot_group)   # its own Python worker (decision 1617)
    return events
