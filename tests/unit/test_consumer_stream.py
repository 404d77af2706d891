"""The consumers' read loop options: the heartbeat a liveness probe reads, set from `--health-file`."""
from __future__ import annotations

import os
import time

from consumers.stream import ReadLimits, beat
from crawler.cli import build_parser
from crawler.consumers import read_limits


def test_a_beat_creates_the_heartbeat_file_and_moves_its_time_forward(tmp_path):
    heartbeat = tmp_path / "corpus.health"
    beat(heartbeat)
    assert heartbeat.is_file()
    os.utime(heartbeat, (time.time() - 600, time.time() - 600))
    beat(heartbeat)
    assert time.time() - heartbeat.stat().st_mtime < 60


def test_without_a_heartbeat_nothing_is_written(tmp_path):
    beat(None)
    assert ReadLimits().heartbeat is None and not list(tmp_path.iterdir())


def test_the_health_file_option_becomes_the_read_loops_heartbeat(tmp_path):
    for command in (["corpus", "--out", str(tmp_path / "c")], ["index", "--db", str(tmp_path / "i.sqlite")]):
        args = build_parser().parse_args([*command, "--health-file", str(tmp_path / "h")])
        assert read_limits(args).heartbeat == tmp_path / "h"
        assert read_limits(build_parser().parse_args(command)).heartbeat is None
