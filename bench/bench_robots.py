"""Time our robots.txt matcher against Protego's on the real-world corpus, side by side; then its cost per URL
on hostile files.

Usage: .venv/bin/python -m bench.bench_robots [--rounds 3]   (from the project root)
Data: the 392 real robots.txt files and 19,772 (file, agent, URL) probes of
../shared/testdata/robots_realworld, plus the 4,231-file corpus of ../shared/webdata/robots_txt_protego
for parse speed. Each library parses every file once, then answers every probe; the "cold" pass
includes the first query per (file, agent) (our per-agent group resolution), "warm" passes repeat
the same probes. The two libraries take turns on small batches so a shared machine's load falls on
both alike. Prints parse MB/s and checks/s for both. Then the cost of one URL (CPU time, best of
--rounds) on files built to be slow within the 512 KiB parse limit, and on the costliest real files
with long URLs, and how many of those answers ran out of the matching budget (decision 3720).
Bounded loops, no network.

It prints; `python -m bench.run_udfs bench_robots` (or `make bench-udfs`, every benchmark of the pure core)
runs it and writes what it printed into BENCHMARKS.md between `<!-- bench.bench_robots:begin -->` and
`<!-- bench.bench_robots:end -->`, as for the other blocks there.
"""
from __future__ import annotations

import argparse
import gzip
import json
import string
import tarfile
import time
from collections.abc import Callable
from typing import Any

from protego import Protego

from tests.paths import TESTDATA, WEBDATA
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy, RobotsRules, parse_robots

AGENT = "FlinkCrawler/0.1"


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


def hostile_file(lines: Any) -> bytes:
    """`User-agent: *` and as many of `lines` as fit in the default parse limit."""
    out, size = [b"User-agent: *\n"], 14
    for line in lines:
        if size + len(line) + 1 > DEFAULT_ROBOTS_POLICY.max_bytes:
            break
        out.append(line + b"\n")
        size += len(line) + 1
    return b"".join(out)


def repetitive_needles(length: int) -> list[bytes]:
    """Pieces that make a substring search compare almost all of themselves at every place of `/aaaa...`."""
    marks = [c.encode() for c in string.ascii_letters + string.digits if c != "a"]
    return [b"a" * k + mark + b"a" * (length - k - 1) for k in range(length - 1) for mark in marks]


def hostile_cases() -> dict[str, tuple[bytes, list[str]]]:
    h = "https://h.example"
    a_n = hostile_file(b"Disallow: /a*%d$" % i for i in range(1, 10**6))
    a_n_z = hostile_file(b"Disallow: /a*%d*z$" % i for i in range(1, 10**6))
    return {
        "/a*N$ x26,667, 2 KB URL": (a_n, [h + "/a" + c * 2040 + "1" for c in "bcdefghijk"]),
        "/a*N*z$, 2 KB URL ending in z": (a_n_z, [h + "/a" + c * 2040 + "z" for c in "bcdefghijk"]),
        "/a*N*z$, 15-octet URL": (a_n_z, [h + "/a/page-%s.html" % c for c in "bcdefghijk"]),
        "find worst case, 8-octet pieces": (
            hostile_file(b"Disallow: /a*" + n for n in repetitive_needles(8)), [h + "/a" + "a" * 2040] * 10),
        "find worst case, 99-octet pieces": (
            hostile_file(b"Disallow: /a*" + n for n in repetitive_needles(99)), [h + "/a" + "a" * 2040] * 10),
        "rules of 200 pieces": (
            hostile_file(b"Disallow: /*" + b"a*" * 200 + b"b%d" % i for i in range(1, 10**6)), [h + "/" + "a" * 2040] * 10),
        "prefix rules of 1,000 lengths": (
            hostile_file(b"Disallow: /" + b"a" * n + b"x" for n in range(1, 2000)), [h + "/" + "a" * 2040] * 10),
        "26,667 allows of one priority": (
            hostile_file(b"Allow: /a*%05d$" % i for i in range(1, 10**6)), [h + "/a" + "b" * 2040] * 10),
    }


def per_url_us(rules: RobotsRules, urls: list[str], rounds: int) -> float:
    """Best CPU microseconds per URL over `rounds` passes (the first query, which resolves the groups, excluded)."""
    rules.allowed(urls[0], AGENT)
    return min(timed(lambda: [rules.allowed(u, AGENT) for u in urls]) for _ in range(rounds)) / len(urls) * 1e6


def hostile(corpus: list[bytes], rounds: int) -> None:
    budget = DEFAULT_ROBOTS_POLICY.match_budget
    print(f"cost of one URL (match_budget {budget:,}), CPU us, best of {rounds}:")
    for name, (body, urls) in hostile_cases().items():
        rules = parse_robots(body)
        over = sum(rules.check(u, AGENT).over_budget for u in urls)
        print(f"  {name:34} {len(body) / 1024:4.0f} KiB {per_url_us(rules, urls, rounds):8.1f} us/URL"
              f"  over budget {over}/{len(urls)}")
    unit = "/shop/category/item-12345.html?page=2&sort=price&q=blue+shoes"
    for body, wildcards in costliest(corpus, 2):
        rules = parse_robots(body)
        for size in (120, 250, 2048):
            urls = ["https://h.example" + ("/" + (unit * 40)[i:])[:size] for i in range(10)]
            over = sum(rules.check(u, AGENT).over_budget for u in urls)
            print(f"  real file, {wildcards} wildcard rules, {size:4}-octet URL {len(body) / 1024:3.0f} KiB "
                  f"{per_url_us(rules, urls, rounds):8.1f} us/URL  over budget {over}/{len(urls)}")


def costliest(corpus: list[bytes], count: int) -> list[tuple[bytes, int]]:
    """The real files whose rules for our agent hold the most wildcard rules, and how many."""
    def wildcards(body: bytes) -> int:
        buckets, generic = parse_robots(body)._resolve(AGENT)[0]
        return sum(rule[3] is not None for bucket in (*buckets.values(), generic) if bucket for rule in bucket[0])
    return sorted(((body, wildcards(body)) for body in corpus), key=lambda pair: -pair[1])[:count]


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
    hostile(corpus, args.rounds)


if __name__ == "__main__":
    main()
