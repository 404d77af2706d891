"""The crawl's rate with the rendering tier off and at a 2% and a 10% render share, on one web.

Three runs of the crawl benchmark (`bench.crawl_bench`, our crawler only) on the same synthetic web,
where `SPA_SHARE` of the hosts are single-page apps (their pages reachable only through renders): the
tier off, then on with `render.max_share` 0.02 and 0.10 and every page that loads a script bundle a
candidate, so that the cap, not the web, sets the share of pages rendered. Each run reports pages per second (distinct
pages fetched; a render's refetch of its page and its scripts, styles and API requests are not pages),
the renders in the measured window (pages fetched again beyond the run without renders) and their
share of the pages,
CPU per page, and the server's politeness audit, sub-resources included.

    python -m bench.render_share [--hosts 1000] [--seconds 120] [--write]

`--write` replaces its section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.sections import RENDER_HEADING, write_section

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench-render-share:begin -->", "<!-- bench-render-share:end -->"
SPA_SHARE = 0.3
# With the tier on, every page beside a script bundle counts as near-empty (`near_empty_chars` past any
# page's text), so the share of pages rendered is the cap's: `render.max_share` sets it.
EVERY_PAGE = ("render.enabled=true", "render.near_empty_chars=1000000000", "render.max_concurrent=8")
ARMS = (("off", ()), ("2%", (*EVERY_PAGE, "render.max_share=0.02")), ("10%", (*EVERY_PAGE, "render.max_share=0.10")))


def run_arm(settings: tuple[str, ...], hosts: int, seconds: float, out: Path) -> dict:
    command = [sys.executable, "-m", "bench.crawl_bench", "--crawler", "ours", "--hosts", str(hosts),
               "--seconds", str(seconds), "--server-bench-seconds", "0", "--web-set", f"spa_share={SPA_SHARE}",
               "--out", str(out)]
    for pair in settings:
        command += ["--set", pair]
    print("$ " + " ".join(command[1:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "result.json").read_text())["crawlers"]["ours"]


def section(rows: list[tuple[str, dict]], hosts: int, seconds: float) -> str:
    base = rows[0][1]
    lines = [BEGIN, "", f"Our crawler on one web of {hosts:,} hosts, {SPA_SHARE:.0%} of them single-page apps, "
             f"{seconds:.0f} s each, one sitting (`python -m bench.render_share --hosts {hosts} --seconds {seconds:g}`). "
             "Renders are counted as the pages fetched again beyond the run without renders (a render "
             "fetches its page again); their scripts, styles and API answers are not pages:", "",
             "| render share (`render.max_share`) | pages/s | vs off | renders | renders / pages | requests renders made | CPU per page | politeness violations |",
             "|---|---|---|---|---|---|---|---|"]
    for name, ours in rows:
        pages = max(ours["pages_in_window"] - ours.get("repeated_in_window", 0), 1)
        renders = max(ours.get("repeated_in_window", 0) - base.get("repeated_in_window", 0), 0)
        lines.append(f"| {name} | {ours['pages_per_s']:.1f} | {ours['pages_per_s'] / base['pages_per_s']:.2f}× | "
                     f"{renders} | {renders / pages:.1%} | {ours.get('render_requests_in_window', 0)} | "
                     f"{1000 * ours['cpu_per_page_s']:.1f} ms | {ours['violations_total']} |")
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--write", action="store_true", help="replace the section in BENCHMARKS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="render-share-") as work:
        rows = [(name, run_arm(settings, args.hosts, args.seconds, Path(work) / f"arm-{i}"))
                for i, (name, settings) in enumerate(ARMS)]
    text = section(rows, args.hosts, args.seconds)
    print(text)
    if args.write:
        write_section(text, BEGIN, END, RENDER_HEADING)


if __name__ == "__main__":
    main()
