"""Alternated crawl runs of two configurations, summarised as one table.

    .venv/bin/python -m bench.crawl_ab --b job.checkpoint_interval_ms=60000 [--a SECTION.KEY=VALUE ...]
        [--a-rev REV] [--b-rev REV] [--pairs 2] [--hosts 5000] [--seconds 200] [--out bench/out/ab]

Run to run, pages/s on the 2-core machine spread by a few percent (a run's frontier judges more or
fewer of the discovered URLs, and the scheduler splits the cores differently), so one run of each
setting tells little. This runs ours only, B and A alternately (B1 A1 B2 A2 ...: a drift in the
machine's speed falls on both), each with `bench.crawl_bench` (its own stack, its network namespace),
keeps each run's `result.json` and drops its bulky crawl output, then prints a markdown table of the
runs in time order, with the CPU a page of each stage, and each arm's mean. A is the default
configuration unless `--a` sets something. `--a-rev` / `--b-rev` run an arm from a git revision
instead of the working tree (a detached worktree under `--out`, sharing this checkout's virtualenv
and Maven cache, removed at the end): code changes compare the same way settings do. Every run is
bounded by `--seconds` plus the stack's start and stop.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from bench.crawl_bench import BenchSpec
from tests.paths import SHARED

ROOT = Path(__file__).resolve().parents[1]
# Columns: the stage, and how its Flink vertex (or the TaskManager's remainder) is named in result.json.
STAGES = (("parse", "parse"), ("frontier", "frontier"), ("fetch", "fetch"), ("writer", "warc writer"),
          ("dedup", "dedup"), ("rest of the TaskManager", "rest of the taskmanager"))


def run_order(pairs: int) -> list[str]:
    """The arms in the order they run: B first in each pair, so the default's runs are never all first."""
    return [arm for _ in range(pairs) for arm in ("b", "a")]


def bench_command(tag: str, overrides: Sequence[str], hosts: int, seconds: float, out: Path) -> list[str]:
    """The `bench.crawl_bench` command line of one run (ours only, no server capacity pass)."""
    return [sys.executable, "-m", "bench.crawl_bench", "--crawler", "ours", "--hosts", str(hosts),
            "--seconds", str(seconds), "--server-bench-seconds", "0", "--out", str(out / tag),
            *(arg for pair in overrides for arg in ("--set", pair))]


def stage_ms(ours: dict[str, Any]) -> dict[str, float]:
    """CPU ms a page of each stage of STAGES (dedup's five vertices summed)."""
    by_vertex = [(name.lower(), seconds * 1000) for name, seconds in ours.get("cpu_by_operator", [])]
    return {label: sum(ms for name, ms in by_vertex if name.startswith(prefix)) for label, prefix in STAGES}


def row(tag: str, setting: str, ours: dict[str, Any]) -> list[str]:
    stages = stage_ms(ours)
    lag = ours.get("discovery_lag") or {}
    return [tag, setting, f"{ours['pages_per_s']:.1f}", f"{ours['cpu_per_page_s'] * 1000:.2f}",
            *(f"{stages[label]:.2f}" for label, _ in STAGES),
            f"{lag.get('judged_per_s', 0):,.0f}", f"{lag.get('growth_per_s', 0):+,.0f}"]


def table(runs: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    """Markdown: one row per run (tag, setting, its `ours` result), then each setting's mean pages/s and CPU."""
    header = ["run", "setting", "pages/s", "CPU ms/page", *(label for label, _ in STAGES), "URLs judged/s",
              "backlog growth/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row(tag, setting, ours)) + " |" for tag, setting, ours in runs]
    for setting in dict.fromkeys(setting for _, setting, _ in runs):
        mine = [ours for _, s, ours in runs if s == setting]
        lines.append(f"\n{setting}: {len(mine)} run(s), mean {mean(o['pages_per_s'] for o in mine):.1f} pages/s, "
                     f"{mean(o['cpu_per_page_s'] for o in mine) * 1000:.2f} ms of CPU a page")
    return "\n".join(lines)


def describe(overrides: Sequence[str], rev: str | None = None) -> str:
    setting = ", ".join(overrides) if overrides else "defaults"
    return f"{rev}: {setting}" if rev else setting


def add_worktree(rev: str, path: Path) -> Path:
    """A detached checkout of `rev` at `path` (replacing one a killed run left) that finds this
    checkout's Maven cache, so its stack starts without downloading anything again."""
    remove_worktree(path)
    subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), rev], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    (path / ".cache").mkdir(exist_ok=True)
    maven = ROOT / ".cache" / "maven"
    if maven.exists():
        (path / ".cache" / "maven").symlink_to(maven, target_is_directory=True)
    return path


def remove_worktree(path: Path) -> None:
    if path.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.crawl_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--a", action="append", default=[], metavar="SECTION.KEY=VALUE", help="arm A's overrides")
    p.add_argument("--b", action="append", default=[], metavar="SECTION.KEY=VALUE", help="arm B's overrides")
    p.add_argument("--a-rev", metavar="REV", help="run arm A from this git revision (default: the working tree)")
    p.add_argument("--b-rev", metavar="REV", help="run arm B from this git revision (default: the working tree)")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--hosts", type=int, default=BenchSpec.hosts)
    p.add_argument("--seconds", type=float, default=200)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "ab")
    args = p.parse_args(argv)
    if not args.b and not args.a and args.a_rev == args.b_rev:
        p.error("give an --a or --b override or two different revisions: two runs of the same configuration "
                "compare nothing")
    if not 1 <= args.pairs <= 10:
        p.error(f"--pairs must be 1-10, got {args.pairs}")
    arms = {"a": list(args.a), "b": list(args.b)}
    revs = {"a": args.a_rev, "b": args.b_rev}
    out = args.out.resolve()
    trees = {arm: out / "trees" / arm for arm, rev in revs.items() if rev}
    try:
        roots = {arm: add_worktree(revs[arm], trees[arm]) if arm in trees else ROOT for arm in arms}
        return _alternate(arms, revs, roots, args, out)
    except subprocess.CalledProcessError as exc:
        print(f"cannot check out a revision: {exc.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    finally:
        for tree in trees.values():
            remove_worktree(tree)


def _alternate(arms: dict[str, list[str]], revs: dict[str, str | None], roots: dict[str, Path],
               args: argparse.Namespace, out: Path) -> int:
    """The runs in `run_order`, each from its arm's checkout; prints the table. 1 when a run fails."""
    done: list[tuple[str, str, dict[str, Any]]] = []
    counts = {"a": 0, "b": 0}
    for arm in run_order(args.pairs):
        counts[arm] += 1
        tag = f"{arm}{counts[arm]}"
        print(f"== {tag}: {describe(arms[arm], revs[arm])}", flush=True)
        proc = subprocess.run(bench_command(tag, arms[arm], args.hosts, args.seconds, out), cwd=roots[arm],
                              # a worktree is not beside ../shared: the web's real pages are found from here
                              env={**os.environ, "PYTHONPATH": str(roots[arm]), "CRAWLER_SHARED_DIR": str(SHARED)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=args.seconds + 900)
        result_file = out / tag / "result.json"
        shutil.rmtree(out / tag / "ours", ignore_errors=True)   # WARC files, logs: gigabytes a run
        if proc.returncode != 0 or not result_file.exists():
            print(f"{tag} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
        ours = json.loads(result_file.read_text())["crawlers"]["ours"]
        done.append((tag, describe(arms[arm], revs[arm]), ours))
        print(f"   {ours['pages_per_s']:.1f} pages/s, {ours['cpu_per_page_s'] * 1000:.2f} ms a page", flush=True)
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
