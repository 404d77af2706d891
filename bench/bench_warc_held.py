"""What keeping held captures in keyed state costs the WARC writer, per page (decision 3780).

    .venv/bin/python -m bench.bench_warc_held [--pages 2000] [--warmup 300] [--rounds 2]

Runs the real `WarcWriterFunction` on a local MiniCluster (process mode, RocksDB state, as in the
job) over real pages of webdata (`trafilatura_eval`, parsed and packed beforehand, so the writer's
input is what parse hands it), twice per round, alternating:
- `direct`: `warc.group_commit_ms = 0`: each capture is durable when written and its events go out
  at once, nothing in state;
- `held`: `warc.group_commit_ms = 50`: each capture's events are a row in keyed state with a
  processing-time timer that settles and emits them (decision 3780).
Both write with `fsync = false`, so the difference is the state and timer work, not the disk; with
`--fsync` both really fsync (files under out/, on disk), comparing a sync per capture with state.
Prints, per arm, CPU per page of this process (the Python worker runs here, PyFlink's local
loopback mode) and of the MiniCluster's JVM, and wall time; then the held arm's extra cost.
"""
from __future__ import annotations

import argparse
import os
import pickle
import queue
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyflink.common import Types
from pyflink.datastream.functions import MapFunction

from bench.bench_extract import load
from operators.dedup import BUNDLE_TYPE, join_key
from operators.warc_files import WarcFileSettings
from operators.warc_writer import EVENT_TYPE, WarcWriterFunction
from tests.integration.harness import FolderFeed, collected, thread_mode_env
from udfs.page_facts import pack_payload, parse_result
from udfs.records import TOPIC_OUTCOMES, FetchRequest, FetchResult
from udfs.urls import host_key, url_fp
from udfs.warc import WarcBuilder, WarcPolicy


class Bundles(MapFunction):
    """Feed line "i" → the i-th prepared bundle (loaded once from a pickle file), under its own lease."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._bundles: list[Any] = []

    def open(self, runtime_context: Any) -> None:
        with open(self._path, "rb") as handle:
            self._bundles = pickle.load(handle)

    def map(self, value: str) -> Any:
        index = int(value)
        bundle = dict(self._bundles[index % len(self._bundles)])
        result = dict(bundle["result"])
        result["request"] = dict(result["request"], lease_id=f"bench-{index}")
        bundle["result"] = result
        return bundle


def prepared_bundles(count: int) -> list[Any]:
    builder = WarcBuilder()
    out = []
    for url, body in load("trafilatura_eval", count):
        if not url.startswith("http"):
            url = "http://bench.example/"
        request = FetchRequest(host=host_key(url), url=url, fp=url_fp(url), kind="page", lease_id="x", depth=1,
                               attempt=1)
        result = FetchResult(request=request, url=url, fetch_status="ok", reason="", http_status=200,
                             http_reason="OK", http_version="1.1",
                             headers=[("Content-Type", "text/html; charset=utf-8")],
                             request_headers=[("Host", host_key(url))], body=body, ip="127.0.0.1",
                             started_at=time.time() - 0.2, done_at=time.time(), truncated=None)
        out.append(pack_payload(parse_result(result), builder))
    return out


def jvm_cpu_s() -> float:
    """CPU seconds of this process's Java children (the MiniCluster behind the py4j gateway)."""
    total = 0.0
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == me and "java" in stat[:stat.rindex(")")]:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_arm(group_commit_ms: int, pages: int, warmup: int, bundles_file: str, work: Path,
            fsync: bool = False) -> dict[str, float]:
    env = thread_mode_env({"python.execution-mode": "process", "python.fn-execution.bundle.time": "20",
                           "state.backend.type": "rocksdb"})
    (work / "feed").mkdir()
    feed = FolderFeed(work / "feed")
    writer = WarcWriterFunction(str(work / "warc"), WarcFileSettings(fsync=fsync),
                                WarcPolicy(group_commit_ms=group_commit_ms))
    bundles = feed.source(env).map(Bundles(bundles_file), output_type=BUNDLE_TYPE).uid("bundles")
    no_verdicts = bundles.flat_map(lambda b: [], output_type=BUNDLE_TYPE).uid("no-verdicts")
    events = (bundles.key_by(join_key, key_type=Types.STRING())
              .connect(no_verdicts.key_by(lambda p: p["key"], key_type=Types.STRING()))
              .process(writer, output_type=EVENT_TYPE).uid("warc-writer-joined")
              # Only a marker per completion comes back: converting whole events to Python objects in
              # the collecting client would cost far more than the writer itself.
              .flat_map(lambda e: [e[1]] if e[0] == TOPIC_OUTCOMES else [], output_type=Types.STRING())
              .uid("completions"))

    def completions(results: queue.Queue, count: int) -> None:
        seen = 0
        while seen < count:
            _, item = results.get(timeout=300)
            if isinstance(item, Exception):
                raise item
            seen += 1
    with collected(events, f"bench-held-{group_commit_ms}") as results:
        for start in range(0, warmup, 100):
            feed.send(*range(start, min(warmup, start + 100)))
        completions(results, warmup)
        cpu0, jvm0, wall0 = time.process_time(), jvm_cpu_s(), time.monotonic()
        for start in range(warmup, warmup + pages, 100):
            feed.send(*range(start, min(warmup + pages, start + 100)))
        completions(results, pages)
        cpu, jvm, wall = time.process_time() - cpu0, jvm_cpu_s() - jvm0, time.monotonic() - wall0
    return {"python_ms": cpu / pages * 1000, "jvm_ms": jvm / pages * 1000, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--distinct", type=int, default=200, help="distinct webdata pages, reused round-robin")
    parser.add_argument("--fsync", action="store_true",
                        help="really fsync (the WARC files then go under ./out/bench-warc-held, on disk)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundles_file = Path(tmp) / "bundles.pickle"
        prepared = prepared_bundles(args.distinct)
        bundles_file.write_bytes(pickle.dumps(prepared))
        sizes = sorted(len(pickle.dumps(b)) for b in prepared)
        print(f"{len(prepared)} distinct pages, bundle median {statistics.median(sizes) / 1024:.1f} KiB; "
              f"{args.pages} pages per arm after {args.warmup} warm-up", flush=True)
        results: dict[str, list[dict[str, float]]] = {"direct": [], "held": []}
        for round_ in range(args.rounds):
            for arm, group_ms in (("direct", 0), ("held", 50)) if round_ % 2 == 0 else (("held", 50), ("direct", 0)):
                work = (Path("out/bench-warc-held") if args.fsync else Path(tmp)) / f"{arm}-{round_}-{os.getpid()}"
                work.mkdir(parents=True)
                figures = run_arm(group_ms, args.pages, args.warmup, str(bundles_file), work, args.fsync)
                if args.fsync:
                    shutil.rmtree(work)
                results[arm].append(figures)
                print(f"round {round_} {arm:<6} python {figures['python_ms']:.3f} ms/page, "
                      f"jvm {figures['jvm_ms']:.3f} ms/page, wall {figures['wall_s']:.1f} s", flush=True)
        for key in ("python_ms", "jvm_ms"):
            direct = statistics.median(r[key] for r in results["direct"])
            held = statistics.median(r[key] for r in results["held"])
            print(f"{key[:-3]:<6} direct {direct:.3f} ms/page, held {held:.3f} ms/page, extra {held - direct:+.3f} ms/page")


if __name__ == "__main__":
    sys.exit(main())
