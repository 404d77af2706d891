"""bench.bench_frontier runs end to end on a small web and reports each figure it promises."""
from __future__ import annotations

import pytest

from bench import bench_frontier


def test_the_frontier_bench_reports_admission_and_the_lease_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_frontier.main(["--hosts", "20", "--pages-per-host", "30", "--warmup-pages", "10", "--pages", "20"]) == 0
    out = capsys.readouterr().out
    assert out.count("frontier CPU per URL") == 2
    assert "lease cycle (completion, timer, release): 80 pages; recrawl_scheduled 80, released 80" in out
    assert "frontier CPU per fetched page" in out


def test_every_request_kind_gets_the_answer_its_event_type_names() -> None:
    request = {"host": "h.example", "lease_id": "h.example/1-1", "url": "http://h.example/", "fp": 7}
    assert bench_frontier.answer({**request, "kind": "page"}, 1.0)["type"] == "completion"
    assert bench_frontier.answer({**request, "kind": "robots"}, 1.0)["http_status"] == 200
    assert {bench_frontier.answer({**request, "kind": kind}, 1.0)["type"] for kind in ("tdmrep", "probe")} == {"tdmrep", "probe"}
