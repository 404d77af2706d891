"""bench.crawl_ab: alternated runs of two settings and the table that compares them."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.crawl_ab import ROOT, add_worktree, bench_command, describe, main, remove_worktree, run_order, stage_ms, table


def ours(pages_per_s: float, cpu_ms: float, parse_ms: float) -> dict:
    return {"pages_per_s": pages_per_s, "cpu_per_page_s": cpu_ms / 1000,
            "cpu_by_operator": [["parse -> (dedup probe, _stream_key_by_map_operator)", parse_ms / 1000],
                                ["frontier -> (Map, _stream_key_by_map_operator)", 0.0015],
                                ["fetch -> robots events", 0.0014],
                                ["warc writer", 0.0009],
                                ["dedup exact -> (dedup settled, dedup to bands)", 0.0001],
                                ["dedup band 0 of 4, _stream_key_by_map_operator", 0.0001],
                                ["rest of the taskmanager (other JVM threads: sources, sinks)", 0.0016]],
            "discovery_lag": {"judged_per_s": 2056.4, "growth_per_s": 1180.2}}


def test_each_pair_runs_the_changed_setting_first_so_a_drift_falls_on_both() -> None:
    assert run_order(3) == ["b", "a", "b", "a", "b", "a"]


def test_a_run_is_ours_alone_with_its_overrides_and_no_server_capacity_pass() -> None:
    command = bench_command("b1", ["job.checkpoint_interval_ms=60000"], 5000, 200, Path("/tmp/ab"))
    assert command[1:] == ["-m", "bench.crawl_bench", "--crawler", "ours", "--hosts", "5000", "--seconds", "200",
                           "--server-bench-seconds", "0", "--out", "/tmp/ab/b1",
                           "--set", "job.checkpoint_interval_ms=60000"]


def test_stages_sum_the_five_dedup_vertices_and_read_milliseconds() -> None:
    stages = stage_ms(ours(159.1, 9.81, 3.54))
    assert stages["parse"] == pytest.approx(3.54)
    assert stages["dedup"] == pytest.approx(0.2)
    assert stages["rest of the TaskManager"] == pytest.approx(1.6)


def test_the_table_lists_runs_in_time_order_and_each_settings_mean() -> None:
    text = table([("b1", "job.checkpoint_interval_ms=60000", ours(150.5, 10.31, 3.88)),
                  ("a1", "defaults", ours(159.1, 9.81, 3.54)),
                  ("b2", "job.checkpoint_interval_ms=60000", ours(159.2, 9.91, 3.65))])
    lines = text.splitlines()
    assert lines[0].startswith("| run | setting | pages/s | CPU ms/page | parse |")
    assert [line.split(" | ")[0] for line in lines[2:5]] == ["| b1", "| a1", "| b2"]
    assert "| 150.5 | 10.31 | 3.88 |" in lines[2] and "2,056 | +1,180 |" in lines[2]
    assert "job.checkpoint_interval_ms=60000: 2 run(s), mean 154.8 pages/s, 10.11 ms of CPU a page" in text
    assert "defaults: 1 run(s), mean 159.1 pages/s, 9.81 ms of CPU a page" in text


def test_two_arms_of_the_same_configuration_are_refused_before_any_run(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--pairs", "1"])
    assert "compare nothing" in capsys.readouterr().err


def test_two_arms_of_the_same_revision_and_settings_are_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--pairs", "1", "--a-rev", "HEAD", "--b-rev", "HEAD"])
    assert "compare nothing" in capsys.readouterr().err


def test_an_arm_from_a_revision_names_it_before_its_settings() -> None:
    assert describe([], "f7b645c") == "f7b645c: defaults"
    assert describe(["job.frontier_nice=0"]) == "job.frontier_nice=0"


def test_a_revision_is_checked_out_beside_the_tree_with_its_maven_cache_and_removed(tmp_path: Path) -> None:
    tree = add_worktree("HEAD", tmp_path / "trees" / "b")
    try:
        assert (tree / "bench" / "crawl_ab.py").exists()
        if (ROOT / ".cache" / "maven").exists():
            assert (tree / ".cache" / "maven").resolve() == (ROOT / ".cache" / "maven").resolve()
    finally:
        remove_worktree(tree)
    assert not tree.exists()
