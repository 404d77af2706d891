"""Content dedup: the pure decisions per call, and the dedup operators on a MiniCluster in `thread`
vs `process` mode (decision 1303). Bounded loops, no network.

    .venv/bin/python -m bench.bench_dedup [--pages N] [--body-kb KB] [--skip-flink]

Pages are generated inside the job (a sequence source and a map), 10% exact duplicates and 10%
near-duplicates (one bit flipped); rates are the difference of two runs (N and N/4 pages), so job
start-up cancels out; `none` is the same job without the dedup operators. With dedup the job ends in
the verdicts (the page's probe goes through dedup, not the page: decision 1616).
"""
from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from typing import Any

from udfs.dedup import (DedupPolicy, OwnerRow, closest, decide_exact, decode_band, decode_owner, encode_band,
                        encode_owner, insert, probe_keys, response_record_id)


def pure_figures(calls: int) -> None:
    """Per-call costs of what each operator does per page (CPU time of this process)."""
    policy = DedupPolicy()
    rng = random.Random(1)
    row = OwnerRow("http://h.test/a", 1, "2026-11-29T12:00:00.000000Z", "sha1:" + "A" * 32,
                   response_record_id("http://h.test/a", 1.0, "L"), 1.0)
    band = [(rng.getrandbits(64), f"http://h{i}.test/page/{i}.html", rng.getrandbits(64), f"h{i}.test")
            for i in range(policy.band_capacity)]
    stored = encode_band(band)
    text = encode_owner(row)

    def exact() -> None:
        decide_exact(decode_owner(text), row, policy)
        encode_owner(row)

    def probe() -> None:
        fp = rng.getrandbits(64)
        entries = decode_band(stored)
        closest(entries, fp, 7, "h.test", policy.max_hamming)
        encode_band(insert(entries, (fp, "http://h.test/x", 7, "h.test"), policy.band_capacity)[0])

    for label, fn in (("exact verdict (decode+decide+encode)", exact),
                      (f"band probe, full band of {policy.band_capacity}", probe),
                      ("probe keys", lambda: probe_keys(rng.getrandbits(64), policy))):
        start = time.process_time()
        for _ in range(calls):
            fn()
        elapsed = time.process_time() - start
        print(f"{label:<40} {calls / elapsed:>10.0f} calls/s")


def make_bundle(i: int, body_kb: int) -> dict[str, Any]:
    """Page `i`: every 10th repeats page i-1's payload under its own URL, every 10th + 5 is page i-1 with one
    SimHash bit flipped, the rest are distinct."""
    source = i - 1 if i % 10 == 0 and i else i
    body = hashlib.sha256(str(source).encode()).digest() * (body_kb * 1024 // 32)
    sim = random.Random(i - 1 if i % 10 == 5 else i).getrandbits(64) ^ (1 if i % 10 == 5 else 0)
    url = f"http://h{i % 500}.test/page/{i}.html"
    request = {"host": f"h{i % 500}.test", "url": url, "fp": i, "kind": "page", "lease_id": f"L{i}",
               "depth": 0, "attempt": 0}
    result = {"request": request, "url": url, "fetch_status": "ok", "reason": "", "http_status": 200,
              "http_reason": "OK", "headers": [("Content-Type", "text/html")], "body": body, "ip": "127.0.0.1",
              "started_at": 1.0e9 + i, "done_at": 1.0e9 + i + 0.5, "truncated": None}
    return {"result": result, "content_hash": "sha256:" + hashlib.sha256(body).hexdigest(), "simhash": sim,
            "page": None}


def flink_run(pages: int, body_kb: int, mode: str | None) -> float:
    """Seconds from submission to the last output of one job of `pages` pages; dedup in `mode`, or none."""
    from pyflink.common import Configuration, Types, WatermarkStrategy
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    from jobs.crawl import python_worker_settings
    from jobs.stages import dedup_verdicts
    from operators.dedup import BUNDLE_TYPE
    from operators.python_mode import set_python_mode

    config = Configuration()
    for key, value in {**python_worker_settings(sys.executable), "python.execution-mode": "process",
                       "python.fn-execution.bundle.time": "100"}.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)

    numbers = env.from_source(NumberSequenceSource(0, pages - 1), WatermarkStrategy.no_watermarks(), "numbers")
    stream = (numbers.uid("numbers").map(lambda i: make_bundle(i, body_kb), output_type=BUNDLE_TYPE)
              .uid("generate").name("generate"))
    if mode is not None:
        stream = dedup_verdicts(stream, DedupPolicy(), state_mode=mode)
    # With dedup, the judged probes (each keeps its page's join key); without, the pages.
    out = stream.flat_map(lambda b: [b["key"] if "key" in b else b["result"]["request"]["lease_id"]],
                          output_type=Types.STRING()).uid("ids")
    set_python_mode(env, "thread")
    start = time.monotonic()
    count = sum(1 for _ in out.execute_and_collect(f"bench-dedup-{mode}"))
    assert count == pages, f"{count} outputs for {pages} pages"
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4000)
    parser.add_argument("--body-kb", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--modes", default="none,process,thread", help="comma-separated: none, process, thread")
    parser.add_argument("--skip-flink", action="store_true")
    args = parser.parse_args()
    pure_figures(args.calls)
    if args.skip_flink:
        return
    small = args.pages // 4
    flink_run(small, args.body_kb, None)   # warm-up: the first job in a process starts slower
    for mode in (None if m == "none" else m for m in args.modes.split(",")):
        t_small = flink_run(small, args.body_kb, mode)
        t_big = flink_run(args.pages, args.body_kb, mode)
        rate = (args.pages - small) / max(t_big - t_small, 1e-9)
        print(f"MiniCluster, dedup {mode or 'none':<8} {args.body_kb} KB bodies: {rate:>8.0f} pages/s "
              f"({small} pages in {t_small:.1f} s, {args.pages} in {t_big:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
