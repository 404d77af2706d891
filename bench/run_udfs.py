"""`make bench-udfs`: run every benchmark of the pure core and write their figures into BENCHMARKS.md.

Each benchmark is a module under bench/ that prints its own figures; this runner runs them one after
another (never in parallel: they time CPU), records the machine's load before each, and replaces each
one's block of BENCHMARKS.md with what it printed (`python -m bench.run_udfs bench_urls ...` runs some), so every figure there comes from a run.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- bench-udfs:begin -->", "<!-- bench-udfs:end -->"

# (module, arguments, what it compares)
RUNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("bench.bench_urls", (), "normalize_url + url_fp vs w3lib canonicalize_url, same links"),
    ("bench.bench_robots", (), "RobotsRules.allowed vs Protego can_fetch, same files and probes"),
    ("bench.bench_extract", (), "extraction + links + SimHash per real page; near-duplicate precision/recall"),
    ("bench.bench_sitemaps", (), "sitemap parsing and the trap chain"),
    ("bench.bench_warc", (), "WARC record building and gzip"),
    ("bench.bench_page_path", (), "parse on the crawl benchmark's pages: the native steps alone vs the whole step"),
    ("bench.bench_dedup", ("--skip-flink",), "exact and near-duplicate verdicts and band probes (pure)"),
    ("bench.bench_frontier", (), "the frontier's pure-Python cost per fetched page (state glue, dict-backed state)"),
    ("bench.bench_freshness", (), "recrawl freshness at a fixed fetch budget: ours vs uniform vs halve/x1.5"),
    ("bench.bench_minhash", (), "corpus MinHash/LSH precision and recall on near-duplicate article pairs"),
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_one(module: str, args: tuple[str, ...], what: str) -> str:
    """Run one benchmark module; its block of BENCHMARKS.md, between its own markers."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    took = time.monotonic() - started
    output = (proc.stdout + (proc.stderr if proc.returncode else "")).strip()
    print(f"== {module} ({took:.0f} s, load {load:.1f})\n{output}\n", flush=True)
    return "\n".join([_marker(module, "begin"), f"### `{module}`: {what}", "",
                      f"Run {stamp} on {os.cpu_count()} cores ({_cpu_model()}), Python {platform.python_version()}; "
                      f"load average before the run {load:.1f}; took {took:.0f} s; exit {proc.returncode}.", "",
                      "```", output, "```", _marker(module, "end")])


def _marker(module: str, edge: str) -> str:
    return f"<!-- {module}:{edge} -->"


def replace_block(text: str, module: str, block: str) -> str:
    """`text` with `module`'s block replaced (or added at the end of the generated section)."""
    begin, end = _marker(module, "begin"), _marker(module, "end")
    if begin in text:
        return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    return text.replace(END, block + "\n\n" + END)


def main(argv: list[str]) -> int:
    """Run every benchmark, or those named (module names without `bench.`), one after another."""
    only = set(argv)
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    if BEGIN not in text:
        text += "\n" + BEGIN + "\n" + END + "\n"
    for module, args, what in RUNS:
        if only and module.rsplit(".", 1)[-1] not in only:
            continue
        text = replace_block(text, module, run_one(module, args, what))
        BENCHMARKS.write_text(text)   # after each run: a late failure keeps the earlier figures
    print(f"wrote {BENCHMARKS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
