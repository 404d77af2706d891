"""`make bench-udfs`: run every benchmark of the pure core and write their figures down.

Each benchmark is a module under bench/ that prints its own figures; this runner runs them one after
another (never in parallel: they time CPU), records the machine's load before each, replaces each
one's block of docs/perf/pure-core.md with what it printed, and rewrites BENCHMARKS.md's table of one
headline a benchmark from those blocks (`python -m bench.run_udfs bench_urls ...` runs some). So every
figure in either file comes from a run.
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

from bench.sections import replace_between

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
DETAIL = ROOT / "docs" / "perf" / "pure-core.md"
BEGIN, END = "<!-- bench-udfs:begin -->", "<!-- bench-udfs:end -->"      # BENCHMARKS.md: the headline table
BLOCKS_BEGIN, BLOCKS_END = "<!-- bench-udfs-blocks:begin -->", "<!-- bench-udfs-blocks:end -->"   # DETAIL: the blocks
HEADING = "## The pure core (`make bench-udfs`)"

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

# module -> (headline, patterns): each pattern is searched in the module's output (multi-line mode) and
# its named groups fill the headline; when one finds nothing, the table points to the block instead.
HEADLINES: dict[str, tuple[str, tuple[str, ...]]] = {
    "bench.bench_urls": (
        "normalize_url + url_fp {ours} URLs/s; w3lib canonicalize_url {w3lib} (ours / w3lib {ratio})",
        (r"^normalize_url \+ url_fp\s+(?P<ours>[\d,]+) URLs/s", r"^w3lib canonicalize_url\s+(?P<w3lib>[\d,]+) URLs/s",
         r"^ratio ours / w3lib\s+(?P<ratio>\S+)")),
    "bench.bench_robots": (
        "parse {ours_parse} files/s, Protego {protego_parse}; "
        "allowed (warm) {ours_warm} checks/s, Protego {protego_warm}",
        (r"^ours\s+parse\s+(?P<ours_parse>[\d,]+) files/s.*warm\s+(?P<ours_warm>[\d,]+) checks/s",
         r"^protego\s+parse\s+(?P<protego_parse>[\d,]+) files/s.*warm\s+(?P<protego_warm>[\d,]+) checks/s")),
    "bench.bench_extract": (
        "extract + links + SimHash {median} a real page (median), p90 {p90}; parse alone: lexbor {lexbor}, lxml {lxml}",
        (r"^extract\+links\+simhash over .*: median (?P<median>[\d.]+ ms), p90 (?P<p90>[\d.]+ ms)",
         r"^parser lexbor: median (?P<lexbor>[\d.]+ ms)", r"^parser lxml: median (?P<lxml>[\d.]+ ms)")),
    "bench.bench_sitemaps": (
        "50,000-URL sitemap {xml} URLs/s; trap chain {trap} URLs/s; 200 MB gzip bomb: {bomb}",
        (r"^urlset 50k \(xml\)\s+[\d,]+\s+\d+\s+[\d.]+\s+(?P<xml>[\d,]+)",
         r"^trap chain: .*= (?P<trap>[\d,]+) URLs/s", r"^gzip bomb .*\s(?P<bomb>\S+)$")),
    "bench.bench_warc": (
        "build + gzip (level 6) + CDXJ {full} records/s; deflate a record (level 6): libdeflate {lib}, zlib-ng {ng}",
        (r"^build \+ to_gzip\(6\) \+ cdxj_line\s+(?P<full>[\d,]+) records/s",
         r"^deflate a response block at level 6: libdeflate.*?\) (?P<lib>[\d.]+ ms)"
         r".*zlib-ng stream (?P<ng>[\d.]+ ms)")),
    "bench.bench_page_path": (
        "the whole parse step {whole} a page, {share} of it in native code",
        (r"whole parse step.*?(?P<whole>[\d.]+ ms)/page", r"of it native.*?\((?P<share>\d+%)\)")),
    "bench.bench_dedup": (
        "exact verdict {exact} calls/s; band probe {probe} calls/s",
        (r"^exact verdict.*?(?P<exact>\d+) calls/s", r"^band probe.*?(?P<probe>\d+) calls/s")),
    "bench.bench_frontier": (
        "frontier CPU {every} a page (every link sent), {writer} (writer filter on); lease cycle {lease} a page",
        (r"^every link sent:.*\n\s*frontier CPU per page\s+(?P<every>[\d.]+ ms)",
         r"^writer filter on.*\n\s*frontier CPU per page\s+(?P<writer>[\d.]+ ms)",
         r"frontier CPU per fetched page\s+(?P<lease>[\d.]+ us)")),
    "bench.bench_freshness": (
        "freshness at one fetch budget: ours {ours}, uniform {uniform}, halve/×1.5 {halve}",
        (r"^\| ours[^|]*\| (?P<ours>[\d.]+) \|", r"^\| uniform \| (?P<uniform>[\d.]+) \|",
         r"^\| halve[^|]*\| (?P<halve>[\d.]+) \|")),
    "bench.bench_minhash": (
        "at the default threshold 0.5: precision {p}, recall {r}",
        (r"^\| 0\.5 \| [^|]+\| (?P<p>[\d.]+) \| (?P<r>[\d.]+) \|",)),
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_one(module: str, args: tuple[str, ...], what: str) -> str:
    """Run one benchmark module; its block of docs/perf/pure-core.md, between its own markers."""
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
    """`text` with `module`'s block replaced (or added at the end of the blocks)."""
    begin, end = _marker(module, "begin"), _marker(module, "end")
    if begin in text:
        return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    return text.replace(BLOCKS_END, block + "\n\n" + BLOCKS_END)


def blocks(text: str) -> dict[str, str]:
    """{module: its block, markers included} of every module block in `text`."""
    return {m.group(1): m.group(0)
            for m in re.finditer(r"<!-- (bench\.\w+):begin -->.*?<!-- \1:end -->", text, flags=re.S)}


def headline(module: str, output: str) -> str | None:
    """The one-line summary of `module`'s output, or None when its patterns do not all match."""
    template, patterns = HEADLINES.get(module, ("", ()))
    found: dict[str, str] = {}
    for pattern in patterns:
        m = re.search(pattern, output, flags=re.M)
        if m is None:
            return None
        found.update(m.groupdict())
    return template.format(**found) if patterns else None


def summary_row(module: str, block: str) -> str:
    """`module`'s row of BENCHMARKS.md's table, from its block: headline, date and CPU of the run."""
    fence = re.search(r"^```\n(.*?)^```", block, flags=re.S | re.M)
    code = re.search(r"; exit (-?\d+)\.", block)
    run = re.search(r"^Run (\d{4}-\d\d-\d\d) [\d:]+ UTC on \d+ cores \((.*?)\), Python", block, flags=re.M)
    if code and code.group(1) != "0":
        cell = f"failed (exit {code.group(1)})"
    else:
        cell = headline(module, fence.group(1) if fence else "") or "see its block"
    when = "?"
    if run:
        cpu = re.sub(r"\((R|TM)\)| Processor\b| CPU\b.*", "", run.group(2))
        when = f"{run.group(1)}, {' '.join(cpu.split())}"
    return f"| `{module.removeprefix('bench.')}` | {cell} | {when} |"


def render_summary(detail: str) -> str:
    """BENCHMARKS.md's section (between the markers): one row per block of `detail`, in `RUNS` order."""
    found = blocks(detail)
    order = [m for m, _, _ in RUNS if m in found] + sorted(set(found) - {m for m, _, _ in RUNS})
    link = os.path.relpath(DETAIL, BENCHMARKS.parent)
    return "\n".join([BEGIN, "", "| benchmark | headline (CPU time) | run |", "|---|---|---|",
                      *(summary_row(m, found[m]) for m in order), "",
                      f"Every block in full, with its command, load and the libraries' figures: [{link}]({link}).",
                      "", END])


def replace_summary(text: str, detail: str) -> str:
    """`text` (BENCHMARKS.md) with the table rewritten from `detail` (appended when the markers are absent)."""
    return replace_between(text, render_summary(detail), BEGIN, END, HEADING)


def main(argv: list[str]) -> int:
    """Run every benchmark, or those named (module names without `bench.`), one after another."""
    only = set(argv)
    detail = DETAIL.read_text() if DETAIL.exists() else "# The pure core's benchmarks\n"
    if BLOCKS_BEGIN not in detail:
        detail += "\n" + BLOCKS_BEGIN + "\n" + BLOCKS_END + "\n"
    for module, args, what in RUNS:
        if only and module.rsplit(".", 1)[-1] not in only:
            continue
        detail = replace_block(detail, module, run_one(module, args, what))
        DETAIL.write_text(detail)   # after each run: a late failure keeps the earlier figures
        text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
        BENCHMARKS.write_text(replace_summary(text, detail))
    print(f"wrote {DETAIL} and {BENCHMARKS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
