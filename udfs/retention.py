"""Retention of stored data: the `[retention]` section and the pure age rules (decision 1923).

What is deleted, by its crawl date (the date in its path, not a file time, so the answer is the same on
disk and in S3 and after a copy):
- WARC files and their CDXJ indexes: `crawl/{YYYY-MM-DD}/{subtask}/{name}.warc.gz|.cdxj` under the WARC root;
- corpus partitions: `crawl_date={YYYY-MM-DD}/...` under the corpus folder (hive partitioning).
A path of date D expires once `now` is at least `max_age_days` whole days after the end of day D (UTC),
i.e. when its newest content is older than the limit. 0 keeps data forever.

`lifecycle_configuration` gives the S3 lifecycle rules equivalent to the section, for stores where the
bucket deletes by itself (docs/governance.md shows the default document).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

_DAY_SECONDS = 86_400
_WARC_DATE = re.compile(r"^crawl/(\d{4}-\d{2}-\d{2})/")
_CORPUS_DATE = re.compile(r"^crawl_date=(\d{4}-\d{2}-\d{2})/")
# Longest retention accepted: 100 years. A larger number is a typo, not a policy.
MAX_AGE_DAYS = 36_500


@dataclass(frozen=True)
class RetentionPolicy:
    """The `[retention]` section: how long stored data is kept, in days after its crawl date.

    warc_max_age_days: WARC files and their CDXJ indexes (default 365: a year of captures for replay and
        re-parsing; 0 = keep forever).
    corpus_max_age_days: Parquet partitions of the training corpus (default 730: two years; 0 = keep
        forever). Longer than the WARC limit because the corpus is much smaller and is what is used.
    abort_incomplete_upload_days: S3 lifecycle only: abandoned multipart uploads are cleaned after this
        many days (default 7; 0 = no rule).
    """

    warc_max_age_days: int = 365
    corpus_max_age_days: int = 730
    abort_incomplete_upload_days: int = 7

    def __post_init__(self) -> None:
        for name in ("warc_max_age_days", "corpus_max_age_days", "abort_incomplete_upload_days"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_AGE_DAYS:
                raise ValueError(f"{name} must be a whole number of days in [0, {MAX_AGE_DAYS}] "
                                 f"(0 = keep forever), got {value!r}")


def warc_date(name: str) -> date | None:
    """The crawl date of a name under the WARC root (`crawl/YYYY-MM-DD/...`); None for anything else
    (tombstones.jsonl, a stray file): never raises."""
    return _parse(_WARC_DATE, name)


def corpus_date(name: str) -> date | None:
    """The crawl date of a name under the corpus folder (`crawl_date=YYYY-MM-DD/...`);
    None for anything else (`_state/`, `_dropped.jsonl`): never raises."""
    return _parse(_CORPUS_DATE, name)


def expired(day: date, now: float, max_age_days: int) -> bool:
    """Whether data of crawl date `day` is past `max_age_days` at epoch time `now` (0: never)."""
    if max_age_days == 0:
        return False
    end_of_day = datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(days=1)
    return now >= end_of_day.timestamp() + max_age_days * _DAY_SECONDS


def expired_names(names: list[str], kind: str, now: float, policy: RetentionPolicy) -> list[str]:
    """The names (under a WARC root for kind "warc", a corpus folder for "corpus") that retention deletes."""
    if kind == "warc":
        parse, limit = warc_date, policy.warc_max_age_days
    elif kind == "corpus":
        parse, limit = corpus_date, policy.corpus_max_age_days
    else:
        raise ValueError(f"kind must be 'warc' or 'corpus', got {kind!r}")
    return [name for name in names if (day := parse(name)) is not None and expired(day, now, limit)]


def lifecycle_configuration(policy: RetentionPolicy, warc_prefix: str = "",
                            corpus_prefix: str = "corpus/") -> dict[str, Any]:
    """An S3 `PutBucketLifecycleConfiguration` document equivalent to `policy`.

    S3 counts days from an object's creation, not from the crawl date in its key, and rounds to the
    next midnight UTC, so an object goes at most about a day after `crawler retention` would delete it.
    """
    rules: list[dict[str, Any]] = []
    for rule_id, prefix, days in (("warc-retention", f"{warc_prefix}crawl/", policy.warc_max_age_days),
                                  ("corpus-retention", f"{corpus_prefix}crawl_date=", policy.corpus_max_age_days)):
        if days:
            rules.append({"ID": rule_id, "Status": "Enabled", "Filter": {"Prefix": prefix},
                          "Expiration": {"Days": days + 1}})
    if policy.abort_incomplete_upload_days:
        rules.append({"ID": "abort-incomplete-uploads", "Status": "Enabled", "Filter": {"Prefix": ""},
                      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": policy.abort_incomplete_upload_days}})
    return {"Rules": rules}


def _parse(pattern: re.Pattern[str], name: str) -> date | None:
    match = pattern.match(name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None
