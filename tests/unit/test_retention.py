"""Retention (udfs/retention.py, crawler/retention.py): the age rule by crawl date, the `[retention]`
section, the S3 lifecycle document it implies, and `crawler retention` on local folders (dry run,
deletion of WARC + CDXJ and corpus partitions, audit line). S3: tests/integration/test_consumers.py."""
from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest

from crawler.cli import main
from crawler.paths import ROOT
from durable.audit_log import read_audit
from udfs.config import ConfigError, load_config
from udfs.retention import (RetentionPolicy, corpus_date, expired, expired_names, lifecycle_configuration,
                            warc_date)

DAY = 86_400
JAN1 = 1_767_225_600.0       # 2026-01-01T00:00:00Z


@pytest.mark.parametrize("name,day", [
    ("crawl/2026-01-01/0/00000.warc.gz", date(2026, 1, 1)),
    ("crawl/2025-12-31/12/00003.cdxj", date(2025, 12, 31)),
    ("crawl/2026-02-30/0/00000.warc.gz", None),     # no such day
    ("crawl/latest/0/00000.warc.gz", None),
    ("tombstones.jsonl", None),
    ("other/crawl/2026-01-01/0/00000.warc.gz", None),
])
def test_warc_date_is_read_from_the_path(name, day):
    assert warc_date(name) == day


@pytest.mark.parametrize("name,day", [
    ("crawl_date=2026-01-01/part-abc.parquet", date(2026, 1, 1)),
    ("_state/minhash.sqlite", None), ("_dropped.jsonl", None), ("crawl_date=soon/part.parquet", None),
])
def test_corpus_date_is_read_from_the_partition(name, day):
    assert corpus_date(name) == day


@pytest.mark.parametrize("now,max_age,gone", [
    (JAN1 + DAY + 30 * DAY - 1, 30, False),   # the last second of day 1 is not yet 30 days old
    (JAN1 + DAY + 30 * DAY, 30, True),
    (JAN1 + 10_000 * DAY, 0, False),           # 0 keeps forever
    (JAN1 + DAY, 0, False),
    (JAN1 + DAY, 1, False), (JAN1 + 2 * DAY, 1, True),
])
def test_data_expires_max_age_days_after_the_end_of_its_crawl_day(now, max_age, gone):
    assert expired(date(2026, 1, 1), now, max_age) is gone


def test_expired_names_picks_by_kind_and_leaves_undated_names():
    policy = RetentionPolicy(warc_max_age_days=10, corpus_max_age_days=20)
    now = JAN1 + 15 * DAY
    warc = ["crawl/2025-12-01/0/00000.warc.gz", "crawl/2025-12-01/0/00000.cdxj", "crawl/2026-01-10/0/00000.warc.gz",
            "tombstones.jsonl"]
    corpus = ["crawl_date=2025-12-01/part-1.parquet", "crawl_date=2026-01-05/part-2.parquet", "_dropped.jsonl"]
    assert expired_names(warc, "warc", now, policy) == warc[:2]
    assert expired_names(corpus, "corpus", now, policy) == corpus[:1]
    with pytest.raises(ValueError, match="kind"):
        expired_names(warc, "logs", now, policy)


@pytest.mark.parametrize("kwargs", [{"warc_max_age_days": -1}, {"corpus_max_age_days": 1.5},
                                    {"warc_max_age_days": True}, {"abort_incomplete_upload_days": 10**6}])
def test_the_policy_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetentionPolicy(**kwargs)


def test_the_section_is_part_of_the_configuration():
    assert load_config().retention == RetentionPolicy()
    assert load_config("[retention]\nwarc_max_age_days = 30\n").retention.warc_max_age_days == 30
    with pytest.raises(ConfigError, match="retention"):
        load_config("", ["retention.keep_forever=true"])


def test_the_lifecycle_rules_follow_the_policy():
    doc = lifecycle_configuration(RetentionPolicy(warc_max_age_days=30, corpus_max_age_days=0), "archive/")
    assert doc == {"Rules": [
        {"ID": "warc-retention", "Status": "Enabled", "Filter": {"Prefix": "archive/crawl/"}, "Expiration": {"Days": 31}},
        {"ID": "abort-incomplete-uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}}]}


def test_the_documented_lifecycle_is_the_one_the_defaults_give(capsys):
    text = (ROOT / "docs" / "governance.md").read_text(encoding="utf-8")
    documented = json.loads(re.search(r"<!-- lifecycle -->\s*```json\n(.*?)```", text, re.S).group(1))
    assert main(["retention", "--lifecycle"]) == 0
    assert json.loads(capsys.readouterr().out) == documented == lifecycle_configuration(RetentionPolicy())


def _touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")


OLD, NEW = "2020-01-01", "2099-01-01"


@pytest.fixture
def stored(tmp_path):
    warc, corpus = tmp_path / "warc", tmp_path / "corpus"
    _touch(warc, f"crawl/{OLD}/0/00000.warc.gz", f"crawl/{OLD}/0/00000.cdxj", f"crawl/{OLD}/1/00000.warc.gz",
           f"crawl/{OLD}/0/NOTES.txt", f"crawl/{NEW}/0/00000.warc.gz", "tombstones.jsonl")
    _touch(corpus, f"crawl_date={OLD}/part-a.parquet", f"crawl_date={NEW}/part-b.parquet", "_state/minhash.sqlite")
    return warc, corpus


def _run(warc: Path, corpus: Path, log: Path, *extra: str) -> list[str]:
    return ["retention", "--warc-root", str(warc), "--corpus", str(corpus), "--audit-log", str(log),
            "--actor", "ops", *extra]


def test_a_dry_run_lists_what_would_go_and_deletes_nothing(stored, tmp_path, capsys):
    warc, corpus = stored
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert main(_run(warc, corpus, tmp_path / "audit.jsonl", "--dry-run")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True
    assert [s["files"] for s in report["swept"]] == [3, 1]
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before
    assert not (tmp_path / "audit.jsonl").exists()


def test_retention_deletes_old_warc_files_indexes_and_partitions_and_audits(stored, tmp_path, capsys):
    warc, corpus = stored
    assert main(_run(warc, corpus, tmp_path / "audit.jsonl")) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(s["kind"], s["files"], s["dates"]) for s in report["swept"]] == [("warc", 3, [OLD]), ("corpus", 1, [OLD])]
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["audit.jsonl", "corpus/_state/minhash.sqlite", f"corpus/crawl_date={NEW}/part-b.parquet",
                    f"warc/crawl/{OLD}/0/NOTES.txt", f"warc/crawl/{NEW}/0/00000.warc.gz", "warc/tombstones.jsonl"]
    assert not (corpus / f"crawl_date={OLD}").exists() and not (warc / f"crawl/{OLD}/1").exists()
    lines = read_audit(tmp_path / "audit.jsonl")
    assert [(l["event"], l["scope"], l["counts"], l["actor"]) for l in lines] == [
        ("retention.deleted", "warc", {"files": 3, "dates": 1}, "ops"),
        ("retention.deleted", "corpus", {"files": 1, "dates": 1}, "ops")]


def test_a_limit_of_zero_keeps_everything(stored, tmp_path, capsys):
    warc, corpus = stored
    assert main(_run(warc, corpus, tmp_path / "audit.jsonl", "--set", "retention.warc_max_age_days=0",
                     "--set", "retention.corpus_max_age_days=0")) == 0
    assert [s["files"] for s in json.loads(capsys.readouterr().out)["swept"]] == [0, 0]
    assert (warc / f"crawl/{OLD}/0/00000.warc.gz").exists()
