"""The `[storage]` section and `s3://` WARC roots: what parses, what is refused and why."""
from __future__ import annotations

import pytest

from udfs.config import ConfigError, load_config
from udfs.jobconfig import JobPolicy
from udfs.storage import S3Root, StoragePolicy, is_s3_root, parse_s3_root


@pytest.mark.parametrize("root, bucket, prefix", [
    ("s3://warc", "warc", ""),
    ("s3://warc/", "warc", ""),
    ("s3://my.bucket-1/crawl", "my.bucket-1", "crawl"),
    ("s3://warc/a/b/", "warc", "a/b"),
])
def test_s3_roots_parse_to_bucket_and_prefix(root: str, bucket: str, prefix: str) -> None:
    assert parse_s3_root(root) == S3Root(bucket, prefix)


@pytest.mark.parametrize("root, why", [
    ("s3://", "bucket name"),
    ("s3://Warc/x", "bucket name"),
    ("s3://ab", "bucket name"),
    ("s3://a..b/x", "bucket name"),
    ("s3://warc/a//b", "segments"),
    ("s3://warc/a/../b", "segments"),
    ("/data/warc", "not an s3"),
])
def test_malformed_s3_roots_are_refused_with_the_reason(root: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_s3_root(root)


def test_keys_and_urls_sit_under_the_prefix() -> None:
    assert parse_s3_root("s3://warc/run").url("crawl/d/0/00000.warc.gz") == "s3://warc/run/crawl/d/0/00000.warc.gz"
    assert parse_s3_root("s3://warc").key("crawl/x") == "crawl/x"


def test_local_roots_are_not_s3() -> None:
    assert not is_s3_root("out/warc") and not is_s3_root("/s3://x") and is_s3_root("s3://warc")


def test_job_refuses_a_malformed_s3_warc_root_at_start_up() -> None:
    assert JobPolicy(warc_root="s3://warc/p").warc_root == "s3://warc/p"
    with pytest.raises(ValueError, match="bucket name"):
        JobPolicy(warc_root="s3://Bad_Bucket/p")


@pytest.mark.parametrize("kwargs, message", [
    ({"endpoint_url": "127.0.0.1:9000"}, "endpoint_url"),
    ({"endpoint_url": "http://host/path"}, "endpoint_url"),
    ({"addressing_style": "dns"}, "addressing_style"),
    ({"access_key_id": "id"}, "set together"),
    ({"secret_access_key": "s"}, "set together"),
    ({"server_side_encryption": "aes256"}, "server_side_encryption"),
    ({"sse_kms_key_id": "key"}, "sse_kms_key_id"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"staging_dir": ""}, "staging_dir"),
    ({"max_file_bytes": 0}, "max_file_bytes"),
    ({"max_file_age_s": 0.0}, "max_file_age_s"),
    ({"timeout_s": 0.0}, "timeout_s"),
    ({"upload_retry_initial_s": float("nan")}, "upload_retry_initial_s"),
    ({"upload_retry_max_s": float("inf")}, "upload_retry_max_s"),
    ({"upload_retry_initial_s": 10.0, "upload_retry_max_s": 5.0}, "upload_retry_max_s"),
])
def test_invalid_storage_values_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StoragePolicy(**kwargs)


@pytest.mark.parametrize("kwargs, args", [
    ({}, {}),
    ({"server_side_encryption": "AES256"}, {"ServerSideEncryption": "AES256"}),
    ({"server_side_encryption": "aws:kms", "sse_kms_key_id": "k1"}, {"ServerSideEncryption": "aws:kms",
                                                                      "SSEKMSKeyId": "k1"}),
])
def test_encryption_becomes_put_object_arguments(kwargs: dict, args: dict) -> None:
    assert StoragePolicy(**kwargs).upload_args() == args


def test_storage_section_loads_from_config_and_rejects_unknown_keys() -> None:
    config = load_config('[storage]\nendpoint_url = "http://127.0.0.1:9000"\nmax_file_age_s = 5\n')
    assert config.storage.endpoint_url == "http://127.0.0.1:9000" and config.storage.max_file_age_s == 5.0
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("[storage]\nbucket = \"x\"\n")


def test_upload_retries_back_off_exponentially_up_to_the_cap() -> None:
    policy = StoragePolicy(upload_retry_initial_s=1.0, upload_retry_max_s=20.0)
    assert [policy.upload_retry_s(n) for n in range(0, 8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    assert policy.upload_retry_s(10_000) == 20.0


def test_an_s3_url_maps_back_to_its_relative_path_under_the_root() -> None:
    root = parse_s3_root("s3://warc/run1")
    assert root.relative_of(root.url("crawl/d/0/00000.warc.gz")) == "crawl/d/0/00000.warc.gz"
    assert root.relative_of("s3://warc/run2/crawl/x") is None and root.relative_of("s3://warc/run1/") is None
    assert parse_s3_root("s3://warc").relative_of("s3://warc/crawl/x") == "crawl/x"


def test_default_roll_age_leaves_room_for_the_fetch_within_a_lease() -> None:
    config = load_config()
    assert config.storage.max_file_age_s + config.fetch.total_timeout_s < config.frontier.lease_timeout_s


def test_the_writers_and_parses_own_slot_sharing_groups_add_a_slot_per_subtask_unless_shared() -> None:
    assert JobPolicy().slots == 3                                   # writers' and parse's own (1617, 1824)
    assert JobPolicy(parallelism=2, fetch_parallelism=3).slots == 7
    assert JobPolicy(parse_slot_group="").slots == 2
    assert JobPolicy(parse_slot_group="parse").slots == 3            # parse's own worker (decision 1808)
    assert JobPolicy(parse_slot_group="writer").slots == 2           # parse beside the writers: one group
    assert JobPolicy(parallelism=2, writer_slot_group="", parse_slot_group="parse").slots == 4
    assert JobPolicy(parallelism=2, writer_slot_group="", parse_slot_group="").slots == 2
    assert JobPolicy(parallelism=2, writer_slot_group="default", parse_slot_group="default").slots == 2


def test_parse_parallelism_sets_the_width_of_parses_slot_sharing_group() -> None:
    assert JobPolicy().parse_width == 1 and JobPolicy(parallelism=3).parse_width == 3   # unset: the job's
    assert JobPolicy(parse_parallelism=2).slots == 4                 # fetcher + writer + two parse workers
    assert JobPolicy(parse_parallelism=2, parse_slot_group="").slots == 3     # the default group's widest
    assert JobPolicy(parse_parallelism=3, parse_slot_group="writer").slots == 4
    with pytest.raises(ValueError, match="parse_parallelism must be at least 1"):
        JobPolicy(parse_parallelism=0)
