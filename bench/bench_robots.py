"""Time our robots.txt matcher against Protego's on the real-world corpus, side by side.

Usage: .venv/bin/python -m bench.bench_robots [--rounds 3]   (from the project root)
Data: the 392 real robots.txt files and 19,772 (file, agent, URL) probes of
../shared/testdata/robots_realworld, plus the 4,231-file corpus of ../shared/webdata/robots_txt_protego
for parse speed. Each library parses every file once, then answers every probe; the "cold" pass
includes the first query per (file, agent) (our per-agent group resolution), "warm" passes repeat
the same probes. The two libraries take turns on small batches so a shared machine's load falls on
both alike. Prints parse MB/s and checks/s for both. Bounded loops, no network.
"""
from __future__ import annotations

import argparse
import gzip
import json
import tarfile
import time
from collections.abc import Callable
from typing import Any

from protego import Protego

from tests.paths import TESTDATA, WEBDATA
from udfs.robots import RobotsPolicy, parse_robots


def load_probes() -> tuple[dict[str, bytes], list[tuple[str, str, str]]]:
    with gzip.open(TESTDATA / "robots_realworld" / "robots_realworld_google_oracle.json.gz") as fh:
        data = json.load(fh)
    files = {name: body.encode("utf-8", "surrogatepass") for name, body in data["files"].items()}
    return files, [(c["file"], c["useragent"], c["url"]) for c in data["cases"]]


def load_corpus() -> list[bytes]:
    with tarfile.open(WEBDATA / "robots_txt_protego" / "robots_txt_files.tar.gz") as tar:
        return [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]  # type: ignore[union-attr]


def timed(fn: Callable[[], object]) -> float:
    """CPU seconds of this process: on a shared 2-core machine, wall time mostly measures the neighbours."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def protego_parse(body: bytes) -> Protego:
    return Protego.parse(body.decode("utf-8", "replace"))


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def race(batches: list, runners: list[Callable[[Any], object]]) -> list[float]:
    """Seconds each runner spends on all batches, taking turns batch by batch.

    The machine is shared: alternating small batches exposes both sides to the same load.
    """
    totals = [0.0] * len(runners)
    for batch in batches:
        for i, run in enumerate(runners):
            totals[i] += timed(lambda: run(batch))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="warm query passes (best one is reported)")
    args = parser.parse_args()

    files, probes = load_probes()
    corpus = load_corpus()
    corpus_mb = sum(len(b) for b in corpus) / 1e6
    print(f"probes: {len(probes)} over {len(files)} files; parse corpus: {len(corpus)} files, {corpus_mb:.1f} MB")
    libs = {"ours": parse_robots, "protego": protego_parse}

    parse_s = race(chunks(corpus, 100), [lambda batch, p=p: [p(b) for b in batch] for p in libs.values()])
    parsed = [{name: parse(body) for name, body in files.items()} for parse in libs.values()]
    ask = [lambda batch, r=parsed[0]: [r[f].allowed(url, agent) for f, agent, url in batch],
           lambda batch, r=parsed[1]: [r[f].can_fetch(url, agent) for f, agent, url in batch]]
    batches = chunks(probes, 500)
    cold = race(batches, ask)
    warm = [min(pair) for pair in zip(*(race(batches, ask) for _ in range(args.rounds)))]
    for i, name in enumerate(libs):
        print(f"{name:8} parse {len(corpus) / parse_s[i]:7.0f} files/s {corpus_mb / parse_s[i]:6.2f} MB/s | allowed: "
              f"cold {len(probes) / cold[i]:8.0f} checks/s, warm {len(probes) / warm[i]:8.0f} checks/s")

    big = max(corpus, key=len)
    whole = RobotsPolicy(max_bytes=len(big))
    big_s = race([big] * 3, [lambda body: parse_robots(body, whole), protego_parse])
    for i, name in enumerate(libs):
        print(f"{name:8} largest file ({len(big) / 1e6:.2f} MB, all of it) parsed in {big_s[i] / 3 * 1000:.0f} ms")

if __name__ == "__main__":
    main()
