"""What a rendered page costs against a plain one: CPU, wall time and memory per page.

Against the synthetic web's single-page-app hosts (synthweb.spa), served on loopback by its own
process: plain pages of ordinary hosts are fetched by the crawler's fetcher and parsed as the parse
step parses them (`udfs.page_facts.parse_result`); app pages are fetched as render leases by the
rendering tier (`operators.render.RenderTier`: the page, then headless Chromium with every request
through the fetcher and the sub-resource cache) and parsed from their DOM. CPU is this process's plus,
for renders, every process of the browser's session (Chromium's browser, renderer, GPU and utility
processes, read from /proc); memory is this process's peak allocation during a page (tracemalloc, in a second pass: it slows
every allocation) and, for renders, the browser's proportional set size (PSS) after the pages. The host delay of the render
leases is 0 here: the pacing is the crawl's, not the page's cost.

    python -m bench.bench_render [--pages 40] [--write]

Run it in a network namespace with only loopback (scripts/in-netns.sh), the machine otherwise quiet.
`--write` replaces its section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.sections import RENDER_HEADING, write_section
from operators.browser import find_chromium
from operators.fetch import Fetcher
from operators.render import RenderTier
from synthweb import SyntheticWebProcess, WebPolicy, build_web
from synthweb.model import policy_to_dict
from udfs.netguard import FetchPolicy
from udfs.page_facts import parse_result
from udfs.records import FetchRequest
from udfs.render_policy import RenderPolicy
from udfs.urls import host_key

BEGIN, END = "<!-- bench-render:begin -->", "<!-- bench-render:end -->"
N_HOSTS, SEED = 120, 5
POLICY = WebPolicy(spa_share=0.25, behaviour_share=0.0)
RENDER = RenderPolicy(enabled=True, settle_ms=200, page_timeout_s=20.0)
_TICK = os.sysconf("SC_CLK_TCK")


def _session_pids(session: int) -> list[int]:
    """The live processes of session `session` (field 6 of /proc/PID/stat, after the command's ")")."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[3]) == session:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _session_cpu_s(session: int) -> float:
    """CPU seconds (user + system) of every live process in session `session`."""
    total = 0
    for pid in _session_pids(session):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / _TICK


def _session_pss_mb(session: int) -> float:
    """Proportional set size (MB) of every live process in session `session`."""
    total = 0
    for pid in _session_pids(session):
        try:
            total += sum(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                         if line.startswith("Pss:"))
        except OSError:
            continue
    return total / 1024


def _lease(url: str, render: str | None) -> FetchRequest:
    request = FetchRequest(host=host_key(url), url=url, fp=1, kind="page", lease_id="bench/1", depth=1,  # type: ignore[typeddict-item]
                           attempt=1)
    if render is not None:
        request.update(render=render, delay_s=0.0)  # type: ignore[typeddict-item]
    return request


async def _measure(fetch_policy: FetchPolicy, urls: list[str], render: bool) -> dict[str, float]:
    fetcher = Fetcher(fetch_policy)
    tier = RenderTier(fetcher, RENDER, fetch_policy.user_agent)
    cpu, wall, peak = [], [], []
    browser_cpu = 0.0
    pss = 0.0
    try:
        # Left out: the browser's start (once per subtask) and the extractor's first page (it loads the
        # language model once per process).
        parse_result(await tier.fetch(_lease(urls[0], "app_root" if render else None)))
        urls = urls[1:]
        session = tier._browser._proc.pid if render and tier._browser and tier._browser._proc else None
        before_browser = _session_cpu_s(session) if session else 0.0
        for url in urls:
            started, started_cpu = time.perf_counter(), time.process_time()
            result = await tier.fetch(_lease(url, "app_root" if render else None))
            bundle = parse_result(result)
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started)
            assert bundle["page"] is not None, (url, result["fetch_status"], result.get("render", {}).get("error"))
        if session:
            browser_cpu = _session_cpu_s(session) - before_browser
        # Memory apart: tracemalloc slows every allocation, so the timed pass runs without it.
        for url in urls:
            tracemalloc.start()
            parse_result(await tier.fetch(_lease(url, "app_root" if render else None)))
            peak.append(tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.stop()
        if session:
            pss = _session_pss_mb(session)
        hits = tier.cache.hit_ratio()
    finally:
        await tier.close()
        await fetcher.close()
    n = len(urls)
    return {"pages": n, "cpu_ms": 1000 * (sum(cpu) + browser_cpu) / n, "own_cpu_ms": 1000 * sum(cpu) / n,
            "browser_cpu_ms": 1000 * browser_cpu / n, "wall_ms": 1000 * statistics.median(wall),
            "peak_alloc_mb": max(peak), "browser_pss_mb": pss, "cache_hit_ratio": hits if render else 0.0}


def run(pages: int) -> dict[str, dict[str, float]]:
    described = build_web(N_HOSTS, SEED, POLICY)
    with tempfile.TemporaryDirectory(prefix="bench-render-") as work:
        policy_file = Path(work) / "web-policy.json"
        policy_file.write_text(json.dumps(policy_to_dict(POLICY)))
        (Path(work) / "web").mkdir()
        web = SyntheticWebProcess(N_HOSTS, SEED, Path(work) / "web", policy_file=policy_file)
        web.start()
        try:
            port = web.port
            host_map = tuple(line for line in web.host_map.read_text().splitlines() if line.strip())
            fetch_policy = FetchPolicy(allow_cidrs=("127.0.0.0/8",), resolve_dns=False, total_timeout_s=20.0,
                                       host_map=host_map)
            apps = [h for h in described.hosts if h.spa]
            plain_hosts = [h for h in described.hosts if not h.spa]
            app_urls = [f"http://{h.name}:{port}{p.path}" for h in apps for p in h.pages
                        if p.content_type.startswith("text/html")][:pages + 1]
            plain_urls = [f"http://{h.name}:{port}{p.path}" for h in plain_hosts for p in h.pages
                          if p.content_type.startswith("text/html")][:pages + 1]
            plain = asyncio.run(_measure(fetch_policy, plain_urls, render=False))
            rendered = asyncio.run(_measure(fetch_policy, app_urls, render=True))
            rendered_plain = asyncio.run(_measure(fetch_policy, plain_urls, render=True))
        finally:
            web.stop()
    return {"plain": plain, "rendered": rendered, "rendered_plain": rendered_plain}


def section(figures: dict[str, dict[str, float]]) -> str:
    plain = figures["plain"]
    renders = (figures["rendered"], figures["rendered_plain"])

    def cpu(f: dict[str, float]) -> str:
        return f"{f['cpu_ms']:.1f} ({f['own_cpu_ms']:.1f} crawler + {f['browser_cpu_ms']:.1f} Chromium)"

    rows = [
        ("CPU per page (ms)", f"{plain['cpu_ms']:.1f}", *(cpu(f) for f in renders),
         " / ".join(f"{f['cpu_ms'] / plain['cpu_ms']:.0f}×" for f in renders)),
        ("wall time per page, median (ms)", f"{plain['wall_ms']:.1f}", *(f"{f['wall_ms']:.1f}" for f in renders),
         " / ".join(f"{f['wall_ms'] / plain['wall_ms']:.0f}×" for f in renders)),
        ("crawler's largest allocation peak during a page (MB)", f"{plain['peak_alloc_mb']:.1f}",
         *(f"{f['peak_alloc_mb']:.1f}" for f in renders), ""),
        ("browser's memory after the pages (PSS, MB)", "—", *(f"{f['browser_pss_mb']:.0f}" for f in renders), ""),
        ("sub-resource cache hit ratio", "—", *(f"{f['cache_hit_ratio']:.2f}" for f in renders), ""),
    ]
    lines = [BEGIN, "", f"{int(plain['pages'])} ordinary pages and {int(renders[0]['pages'])} single-page-app pages "
             f"of the synthetic web, fetched and parsed one at a time on {platform.machine()} with "
             f"{os.cpu_count()} CPUs (`python -m bench.bench_render`; the browser's start and the extractor's first "
             "page left out). The ordinary pages are real pages of the web's corpus with their own scripts, "
             "styles and fonts; they are measured plain and rendered:", "",
             "| per page | plain | rendered app page | rendered ordinary page | rendered / plain (app / ordinary) |",
             "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows]
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--write", action="store_true", help="replace the section in BENCHMARKS.md")
    args = parser.parse_args()
    if find_chromium() is None:
        raise SystemExit("no Chromium on PATH (apt-get install chromium)")
    text = section(run(args.pages))
    print(text)
    if args.write:
        write_section(text, BEGIN, END, RENDER_HEADING)


if __name__ == "__main__":
    main()
