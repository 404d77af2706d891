"""Real screenshots of the Flink dashboard during a crawl, for docs/metrics.md: not part of CI.

Brings up a stack as `crawler up` does (Kafka + a Flink session cluster, in a temporary state folder on
free ports), serves the synthetic web, submits the crawl job as `crawler crawl` does, lets it crawl, then
drives headless Chromium (Debian's `chromium`, through Playwright) over the running dashboard and writes:

  docs/img/dashboard-job-graph.png        the running job's graph, records and back-pressure per vertex
  docs/img/dashboard-fetch-metrics.png    the fetch vertex's Metrics tab with our fetch metrics charted
  docs/img/dashboard-frontier-metrics.png the frontier vertex's Metrics tab with its gauges
  docs/img/dashboard-taskmanager.png      the TaskManager's page (memory, slots, JVM)

then cancels the job and tears everything down. Run it in the loopback-only namespace, so that the
stack's fixed ports (JobManager RPC 6123, Prometheus 9249-9259) clash with nothing on the machine:

  scripts/in-netns.sh .venv/bin/python scripts/dashboard_screenshots.py [--hosts 30] [--crawl-s 60]
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:   # run as a file: the project's packages are beside this folder
    sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from bus import kafka_io  # noqa: E402
from crawler.crawl import RunSpec, read_seed_file, seed_events, submit  # noqa: E402
from crawler.ops import wait_running  # noqa: E402
from crawler.stack import Stack, StackConfig, install  # noqa: E402
from synthweb import SyntheticWebProcess  # noqa: E402
from udfs.records import TOPIC_FRONTIER  # noqa: E402

VIEWPORT = {"width": 1600, "height": 1500}
# Metric ids as the vertex's Metrics tab lists them: <subtask>.<operator>.<group>.<name>
# three charts: what fits above the vertex table at this viewport
FETCH_METRICS = ("0.fetch.fetch.http_2xx_per_s", "0.fetch.fetch.http_4xx_per_s", "0.fetch.fetch.total_p95_us")
# discovered links queue at priority 5 (udfs/page_events.py PRIORITY_LINK)
FRONTIER_METRICS = ("0.frontier.frontier.hosts_with_queue", "0.frontier.frontier.queue_depth_p5",
                    "0.frontier.frontier.released")
CHART_S = 25.0   # how long the charts gather points before the shot (the dashboard polls every few s)


def shoot(rest: str, job_id: str, out: Path, chromium: str) -> list[Path]:
    """Take the four screenshots of the running job; returns their paths."""
    job = json.loads(_get(f"{rest}/jobs/{job_id}"))
    # the Kafka source of crawl.frontier has "frontier" in its name too
    vertex = {name: next(v["id"] for v in job["vertices"]
                         if name in v["name"].lower() and not v["name"].startswith("Source:"))
              for name in ("fetch", "frontier")}
    taskmanager = json.loads(_get(f"{rest}/taskmanagers"))["taskmanagers"][0]["id"]
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{rest}/#/job/running/{job_id}/overview")
        page.wait_for_selector("flink-dagre svg g.node", timeout=60_000)
        _grow_graph(page)
        page.wait_for_timeout(3000)   # the per-vertex figures arrive after the graph is drawn
        shots.append(_save(page, out / "dashboard-job-graph.png"))
        for name, metrics in (("fetch", FETCH_METRICS), ("frontier", FRONTIER_METRICS)):
            page.goto(f"{rest}/#/job/running/{job_id}/overview/{vertex[name]}/metrics")
            page.wait_for_selector(".metric-selector", timeout=60_000)
            full = page.locator("flink-job-overview-drawer a.handler.full")
            if full.is_visible():   # hidden once the drawer is at full width
                full.click()
            _grow_graph(page)
            for metric in metrics:
                _add_metric(page, metric)
            for big in page.locator("flink-job-chart button", has_text="Big").all():
                big.click()   # a chart across the tab: its whole title shows
            page.wait_for_timeout(CHART_S * 1000)
            page.locator("flink-job-chart").first.scroll_into_view_if_needed()
            shots.append(_save(page, out / f"dashboard-{name}-metrics.png"))
        page.goto(f"{rest}/#/task-manager/{taskmanager}/metrics")
        page.wait_for_timeout(5000)
        shots.append(_save(page, out / "dashboard-taskmanager.png"))
        browser.close()
    return shots


def _grow_graph(page: Page) -> None:
    """Drag the handle between the graph (or the vertex drawer) and the vertex table down, as a reader
    would, so the upper part takes most of the window."""
    page.wait_for_selector("flink-resize .resize", timeout=30_000)
    # the horizontal bar above the vertex table (the drawer has an upright one of its own)
    boxes = [box for handle in page.locator("flink-resize .resize").all()
             for box in [handle.bounding_box()] if box and box["width"] > box["height"]]
    if not boxes:
        return
    box = boxes[0]
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x, VIEWPORT["height"] - 150, steps=10)
    page.mouse.up()


def _add_metric(page: Page, metric: str) -> None:
    """Pick one metric in the Metrics tab's "Add Metric" search box (an ng-zorro select)."""
    select = page.locator(".metric-selector nz-select")
    select.wait_for(timeout=60_000)
    select.click()
    page.keyboard.type(metric)
    page.locator(f"nz-option-item[title='{metric}']").first.click(timeout=30_000)


def _save(page: Page, path: Path) -> Path:
    page.screenshot(path=str(path))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


def _get(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # loopback: never a proxy
    with opener.open(url, timeout=10) as response:
        return response.read().decode()


def _root_exception(rest: str, job_id: str) -> str:
    """The job's last root exception (first lines), for a failure message."""
    history = json.loads(_get(f"{rest}/jobs/{job_id}/exceptions")).get("exceptionHistory", {}).get("entries", [])
    return "\n".join(history[0]["stacktrace"].splitlines()[:15]) if history else "no exception recorded"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def crawl_and_shoot(args: argparse.Namespace, work: Path) -> list[Path]:
    """The stack, the web and the job up; the shots; everything down again (also on failure)."""
    stack = Stack(StackConfig(state_dir=work / "stack", kafka_port=free_port(), kafka_controller_port=free_port(),
                              rest_port=free_port()))
    (work / "web").mkdir()
    web = SyntheticWebProcess(args.hosts, seed=1, workdir=work / "web")
    job_id = None
    try:
        web.start()
        print(f"stack: starting Kafka and Flink in {work} ...", flush=True)
        stack.up()
        spec = RunSpec(seeds=[], out=work / "out", host_map=web.host_map, allow_networks=["127.0.0.0/8"],
                       deny_networks=["127.255.0.0/16"], config_file=None, duration_s=None,
                       overrides=["politeness.default_delay_s=0.5", "job.checkpoint_interval_ms=10000"])
        job_id = submit(stack, spec, int(time.time() * 1000), job_name="crawl dashboard")
        events, _ = seed_events(read_seed_file(web.seeds))
        kafka_io.produce(stack.kafka.bootstrap, TOPIC_FRONTIER, events)
        if wait_running(stack.flink, job_id) != "RUNNING":
            raise RuntimeError(f"job {job_id} did not start; see {work / 'stack' / 'flink' / 'log'}")
        print(f"job {job_id} running; crawling {args.crawl_s:.0f} s before the shots", flush=True)
        time.sleep(args.crawl_s)
        if wait_running(stack.flink, job_id, timeout_s=60) != "RUNNING":
            raise RuntimeError(f"job {job_id} is not running: {_root_exception(stack.flink.rest_url, job_id)}")
        return shoot(stack.flink.rest_url, job_id, args.out, args.chromium)
    finally:
        if job_id:
            subprocess.run([str(stack.flink.home / "bin" / "flink"), "cancel", job_id], env=stack.flink.env(),
                           capture_output=True, timeout=120)
        stack.down()
        web.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=30, help="synthetic web size (default %(default)s)")
    parser.add_argument("--crawl-s", type=float, default=60.0, help="crawl this long before the shots")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNGs")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium",
                        help="the Chromium binary (Debian package `chromium`)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary stack folder (logs)")
    args = parser.parse_args(argv)
    if not Path(args.chromium).is_file():
        parser.error(f"no Chromium at {args.chromium}: apt-get install chromium, or give --chromium")
    install()   # jars and the Flink home; offline once `crawler install` has run
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dashboard-"))
    try:
        crawl_and_shoot(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
