"""Rescale and upgrade through savepoints (issue #7, docs/architecture.md §6) on a real standalone cluster
with two TaskManagers, real Kafka and the synthetic web: the crawl job runs with 2 frontier and 2
fetch subtasks, is moved to 4 and 4 with `crawler rescale` and back to 2 and 2 with `crawler upgrade
--set`, each time stopped with a savepoint and started from it. Hosts move by whole key groups, and
server addresses to the fetch subtask their key group reaches at the new width; the server's request log
and the topics show that no URL was lost and at most the fetches in flight at each savepoint were
repeated, and politeness holds across the restarts.
"""
from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from crawler.flink_cluster import FlinkCluster
from crawler.kafka_broker import KafkaBroker
from crawler.ops import job_args, job_overview, wait_running
from crawler.paths import ROOT
from tests.integration.test_recovery import (WEB_POLICY, ClusterCrawl, assert_pages_resolve, cluster,
                                             politeness_violations, repeated_fetches)
from tests.warc_validators import warcio_check
from udfs.records import TOPIC_PAGES

__all__ = ["cluster"]   # the two-TaskManager cluster fixture, shared with test_recovery

pytestmark = pytest.mark.integration

# Big enough that the crawl is still going through both moves: each takes 20-30 s with no fetching.
HOSTS = 12
POLICY = {**WEB_POLICY, "min_pages": 15, "max_pages": 30}
DELAY_S = 1.5
FETCH_AT_2 = ("job.fetch_parallelism=2",)


def _crawler(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def _parallelism(cluster: FlinkCluster, job_id: str, vertex: str) -> int:
    """The parallelism of the job's first vertex whose description names `vertex`."""
    plan = (cluster.rest(f"/jobs/{job_id}/plan") or {}).get("plan", {})
    return next(n["parallelism"] for n in plan.get("nodes", []) if vertex in n["description"].lower())


@pytest.fixture(scope="module")
def rescaled(cluster: FlinkCluster, kafka_broker: KafkaBroker,
             tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Crawl at 2 and 2, `crawler rescale --parallelism 4 --fetch-parallelism 4`, crawl, `crawler upgrade
    --set job.parallelism=2 --set job.fetch_parallelism=2`, crawl to the end. Slow: about 3-4 minutes
    on 2 cores."""
    work = tmp_path_factory.mktemp("rescale")
    crawl = ClusterCrawl(cluster, kafka_broker, work, hosts=HOSTS, policy=POLICY, delay_s=DELAY_S)
    cli = ["--state-dir", str(cluster.state_dir.parent), "--rest-port", str(cluster.rest_port)]
    moves = []
    try:
        first = crawl.start(parallelism=2, overrides=FETCH_AT_2)
        args = job_args(cluster.rest(f"/jobs/{first}/config"))
        assert wait_running(cluster, first) == "RUNNING"
        for parallelism, command in ((4, ["rescale", "--parallelism", "4", "--fetch-parallelism", "4"]),
                                     (2, ["upgrade", "--set", "job.parallelism=2", "--set", FETCH_AT_2[0]])):
            before = len(crawl.requests())
            crawl.crawl_until(lambda before=before: len(crawl.requests()) >= before + 30, 120,
                              f"crawling before the move to {parallelism}")
            stopping_at = time.monotonic()   # the server log times requests on the monotonic clock
            moved = _crawler(*command, *cli)
            started_at = time.monotonic()
            assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
            done = json.loads(moved.stdout.strip().splitlines()[-1])
            old_state = job_overview(cluster, done["stopped"]).get("state")
            crawl.job_id = done["started"]
            restored = ((cluster.rest(f"/jobs/{crawl.job_id}/checkpoints") or {}).get("latest") or {}).get("restored")
            moves.append(SimpleNamespace(parallelism=parallelism, done=done, old_state=old_state, restored=restored,
                                         window=(stopping_at, started_at),
                                         frontier=_parallelism(cluster, crawl.job_id, "frontier"),
                                         fetch=_parallelism(cluster, crawl.job_id, "fetch"),
                                         requests=len(crawl.requests())))
        final_args = job_args(cluster.rest(f"/jobs/{crawl.job_id}/config"))
        crawl.crawl_until(crawl.finished, 180, "crawling to the end after the moves")
    finally:
        crawl.stop()
    requests = crawl.requests()
    violations = politeness_violations(crawl)
    print(f"\nrescale: {len(requests)} page requests, moves after {[m.requests for m in moves]}, "
          f"{sum(n - 1 for n in repeated_fetches(requests).values())} repeated, {len(violations)} politeness violation(s)")
    return SimpleNamespace(crawl=crawl, work=work, moves=moves, args=args, final_args=final_args,
                           requests=requests, violations=violations)


def test_each_move_stops_the_job_with_a_savepoint_and_restores_it_at_the_new_parallelism(
        rescaled: SimpleNamespace) -> None:
    for move in rescaled.moves:
        assert move.done["state"] == "RUNNING" and move.old_state == "FINISHED"
        assert move.frontier == move.fetch == move.parallelism
        assert move.restored and move.restored["is_savepoint"]
        assert move.done["savepoint"].endswith(move.restored["external_path"].rsplit("/", 1)[-1])


def test_the_new_jobs_keep_the_first_jobs_arguments_plus_the_overrides(rescaled: SimpleNamespace) -> None:
    assert rescaled.final_args == [*rescaled.args, "--set", "job.parallelism=4", "--set", "job.fetch_parallelism=4",
                                   "--set", "job.parallelism=2", "--set", "job.fetch_parallelism=2"]


def test_no_admitted_url_is_lost_and_crawling_goes_on_after_each_move(rescaled: SimpleNamespace) -> None:
    assert not rescaled.crawl.unfinished(), "admitted URLs without a completion"
    assert not rescaled.crawl.pending(), "admitted URLs the server never saw requested"
    assert len(rescaled.requests) > rescaled.moves[-1].requests > rescaled.moves[0].requests


def test_at_most_the_fetch_in_flight_at_each_savepoint_is_repeated(rescaled: SimpleNamespace) -> None:
    # Tolerance: a host has at most one lease in flight when a savepoint is taken, and a fetch is
    # at-least-once; so each repeat of a URL straddles a move of its own, and a host repeats at most one
    # URL a move. (A URL fetched again after the first move can be the one in flight at the second.)
    repeats = repeated_fetches(rescaled.requests)
    for (host, path), n in repeats.items():
        starts = sorted(r["started_at"] for r in rescaled.requests if (r["host"], r["path"]) == (host, path))
        assert _straddled_moves(starts, [m.window for m in rescaled.moves]), (host, path, starts)
    per_host = collections.Counter(host for host, _ in repeats)
    assert all(n <= len(rescaled.moves) for n in per_host.values()), per_host


def _straddled_moves(starts: list[float], windows: list[tuple[float, float]]) -> bool:
    """Whether each next request of a URL can be paired with a move of its own that it and the request
    before it straddle (the earlier began before the move was over, the later after it began)."""
    free = list(windows)
    for before, after in zip(starts, starts[1:]):
        move = next((w for w in free if before <= w[1] and after >= w[0]), None)
        if move is None:
            return False
        free.remove(move)
    return True


def test_politeness_holds_during_and_after_the_moves(rescaled: SimpleNamespace) -> None:
    assert rescaled.violations == [], "\n".join(map(str, rescaled.violations[:20]))


def test_every_published_page_resolves_and_every_writer_file_validates(rescaled: SimpleNamespace) -> None:
    assert_pages_resolve(rescaled.crawl.topic(TOPIC_PAGES))
    files = list((rescaled.work / "warc").rglob("*.warc.gz"))
    assert {"2", "3"} <= {p.parent.name for p in files}, "writers 2 and 3 of parallelism 4 wrote files"
    for path in files:
        assert warcio_check(path).ok, path
