"""The retention-gap arithmetic, its report and record (bus/retention_gap.py), and how `crawler upgrade`,
`rescale` and `restore` read the job's arguments for it (crawler/ops.py). Against a real broker whose
retention deletes records: tests/integration/test_retention_gap.py."""
from __future__ import annotations

import json

import pytest

from crawler.cli import build_parser
from crawler.ops import JOB_ARGS_KEY, UpgradeError, arg_value, restore_args
from bus.retention_gap import (INPUT_TOPICS, STATUS_KEY, PartitionOffsets, RetentionGapError, RetentionReport,
                                   refuse_gap)
from operators.retention_gap import METRICS, topic_metric

GAP = PartitionOffsets("crawl.frontier", 2, committed=10, earliest=60, latest=75, kept_from_ms=1_700_000_000_000)


@pytest.mark.parametrize("committed, earliest, lost", [
    (10, 60, 50),     # resumes 50 records before the oldest one kept
    (60, 60, 0),      # exactly at it
    (70, 60, 0),      # past it
    (None, 60, 0),    # never committed: nothing to compare with, counted as no gap
    (0, 0, 0),
])
def test_records_lost_are_those_between_the_committed_and_the_oldest_kept_offset(committed, earliest, lost):
    assert PartitionOffsets("t", 0, committed, earliest, earliest + 5).lost == lost


def report(*partitions: PartitionOffsets) -> RetentionReport:
    return RetentionReport("crawler", partitions, 1_700_000_123.4567)


def test_the_report_sums_per_topic_and_lists_only_the_partitions_with_a_gap():
    other = PartitionOffsets("crawl.control", 0, committed=3, earliest=5, latest=5)
    fine = PartitionOffsets("crawl.frontier", 0, committed=80, earliest=60, latest=90)
    found = report(fine, GAP, other)
    assert found.lost == 52 and found.gaps == (GAP, other)
    assert found.lost_by_topic() == {"crawl.frontier": 50, "crawl.outcomes": 0, "crawl.control": 2}


def test_the_status_record_names_the_group_the_counts_and_each_partition():
    record = report(GAP).status_record("job")
    assert record == {
        "v": 1, "type": STATUS_KEY, "source": "job", "group": "crawler", "lost": 50,
        "topics": {"crawl.frontier": 50, "crawl.outcomes": 0, "crawl.control": 0},
        "partitions": [{"topic": "crawl.frontier", "partition": 2, "restored": 10, "earliest": 60, "latest": 75,
                        "lost": 50, "kept_from_ms": 1_700_000_000_000}],
        "checked_at": 1_700_000_123.457}
    json.dumps(record)   # a topic value: plain JSON


def test_the_summary_says_where_the_records_went_missing():
    line = report(GAP).summary()
    assert "50 record(s)" in line and "crawl.frontier 50 (partition 2: 50 (offsets 10-59))" in line
    assert report().summary() == "no retention gap for consumer group 'crawler'"


def test_a_gap_is_refused_unless_accepted_and_the_message_says_what_to_do():
    with pytest.raises(RetentionGapError, match=r"nothing was started\. Recover .* --accept-retention-gap"):
        refuse_gap(report(GAP), accept=False, doing="nothing was started")
    refuse_gap(report(GAP), accept=True, doing="nothing was started")
    refuse_gap(report(), accept=False, doing="nothing was started")


def test_the_job_counts_each_input_topic_under_its_own_metric():
    names = METRICS + tuple(map(topic_metric, INPUT_TOPICS))
    assert topic_metric("crawl.frontier") == "retention_gap_records_crawl_frontier"
    assert len(set(names)) == len(names) and all(n.isidentifier() and n.islower() for n in names)


@pytest.mark.parametrize("args, value", [
    (["--bootstrap", "127.0.0.1:9092", "--set", "a.b=1"], "127.0.0.1:9092"),
    (["--bootstrap=127.0.0.1:1"], "127.0.0.1:1"),
    (["--bootstrap", "a:1", "--bootstrap", "b:2"], "b:2"),   # the last one wins, as argparse reads it
    (["--set", "a.b=1"], None),
    (["--bootstrap"], None),
])
def test_the_broker_is_read_from_the_jobs_arguments(args, value):
    assert arg_value(args, "--bootstrap") == value


class NoCluster:
    def rest(self, path: str) -> None:
        return None


def test_restore_takes_the_arguments_given_as_json_with_the_overrides_last():
    given = json.dumps(["--bootstrap", "127.0.0.1:9092", "--set", "job.parallelism=2"])
    assert restore_args(NoCluster(), None, given, ["job.parallelism=1"]) == [
        "--bootstrap", "127.0.0.1:9092", "--set", "job.parallelism=2", "--set", "job.parallelism=1"]


class Remembers:
    def rest(self, path: str) -> dict:
        assert path == f"/jobs/{'f' * 32}/config"
        return {"execution-config": {"user-config": {JOB_ARGS_KEY: json.dumps(["--bootstrap", "x:1"])}}}


def test_restore_reads_the_arguments_of_the_job_that_left_the_state():
    assert restore_args(Remembers(), "f" * 32, None) == ["--bootstrap", "x:1"]


@pytest.mark.parametrize("job_id, given, message", [
    (None, None, "say whose arguments"),
    ("f" * 32, "[]", "either --job-id or --job-args"),
    ("f" * 32, None, "does not know job"),
    (None, '{"bootstrap": 1}', "JSON list of strings"),
])
def test_restore_without_usable_arguments_is_refused(job_id, given, message):
    with pytest.raises(UpgradeError, match=message):
        restore_args(NoCluster(), job_id, given)


@pytest.mark.parametrize("argv", [
    ["upgrade", "--accept-retention-gap"],
    ["rescale", "--parallelism", "2", "--accept-retention-gap"],
    ["restore", "/tmp/savepoint-1", "--job-id", "f" * 32, "--accept-retention-gap"],
])
def test_every_command_that_starts_the_job_takes_the_acceptance(argv):
    assert build_parser().parse_args(argv).accept_retention_gap is True
    assert build_parser().parse_args([a for a in argv if a != "--accept-retention-gap"]).accept_retention_gap is False
