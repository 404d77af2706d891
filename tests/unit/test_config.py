"""The configuration: defaults in one place, overrides from TOML and --set, every mistake named."""
from __future__ import annotations

import tomllib

import pytest

from udfs.config import SECTIONS, ConfigError, defaults_as_toml, load_config, parse_overrides


def test_every_section_loads_with_its_defaults():
    config = load_config()
    assert set(config.sections) == set(SECTIONS)
    assert config.politeness.default_delay_s == 1.0
    assert config.fetch.total_timeout_s == 10.0


def test_toml_and_set_override_defaults_and_set_wins():
    config = load_config("[politeness]\ndefault_delay_s = 2.5\n[job]\nparallelism = 2\n",
                         ["politeness.default_delay_s=3", 'fetch.deny_cidrs=["127.255.0.0/16"]'])
    assert config.politeness.default_delay_s == 3.0
    assert config.job.parallelism == 2
    assert config.fetch.deny_cidrs == ("127.255.0.0/16",)


@pytest.mark.parametrize("toml_text, overrides, message", [
    ("[nosuch]\nx = 1\n", [], "unknown section [nosuch]"),
    ("", ["fetch.bogus=1"], "unknown key(s) bogus"),
    ("", ["politeness.default_delay_s=fast"], "politeness.default_delay_s: expected a number"),
    ("", ["job.parallelism=1.5"], "job.parallelism: expected an integer"),
    ("", ["fetch.resolve_dns=1"], "fetch.resolve_dns: expected true or false"),
    ("", ["politeness.default_delay_s=-1"], "default_delay_s must be a finite number >= 0"),
    ("", ["job.parallelism=0"], "parallelism must be at least 1"),
    ("", ["job.buffer_timeout_ms=0"], "buffer_timeout_ms must be at least 1"),
    ("", ["job.frontier_nice=20"], "frontier_nice must be an integer in [0, 19], got 20"),
    ("", ["job.frontier_nice=-1"], "frontier_nice must be an integer in [0, 19], got -1"),
    ("", ["job.kafka_linger_ms=-1"], "kafka_linger_ms must be a number of milliseconds in [0, 10000], got -1"),
    ("", ["job.kafka_fetch_max_wait_ms=60000"], "kafka_fetch_max_wait_ms must be a number of milliseconds"),
    ("", ["job.kafka_batch_bytes=0"], "kafka_batch_bytes must be a number of bytes in [1, 16 MiB], got 0"),
    ("", ["job.kafka_fetch_min_bytes=0"], "kafka_fetch_min_bytes must be a number of bytes in [1, 16 MiB]"),
    ("", ["job.gather_discoveries_ms=-1"], "gather_discoveries_ms must be a number of milliseconds in [0, 60000], got -1"),
    ("", ["job.gather_discoveries_ms=60001"], "gather_discoveries_ms must be a number of milliseconds in [0, 60000]"),
    ("", ["novalue"], "expected SECTION.KEY=VALUE"),
    ("[politeness\n", [], "not valid TOML"),
    ("x = 1\n", [], "must be a [section] table"),
])
def test_a_bad_value_is_rejected_with_a_message_naming_it(toml_text, overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(toml_text, overrides)
    assert message in str(err.value)


def test_robots_agent_follows_the_user_agent_unless_set():
    ua = "ExampleBot/2.0 (+https://example.org/bot)"
    config = load_config("", [f'fetch.user_agent="{ua}"'])
    assert config.frontier.robots_agent == ua
    assert config.extract.user_agent_token == "examplebot"
    pinned = load_config("", [f'fetch.user_agent="{ua}"', 'frontier.robots_agent="OtherBot"'])
    assert pinned.frontier.robots_agent == "OtherBot"


def test_fetch_robots_cap_follows_the_robots_policy():
    config = load_config("", ["robots.max_bytes=600000"])
    assert config.fetch.robots_max_bytes == 600000


def test_the_release_target_covers_the_wait_for_an_object_store_upload_unless_set():
    assert load_config("", []).frontier.release_target_s == 8.0
    s3 = 'job.warc_root="s3://crawl-bucket/warc"'
    assert load_config("", [s3]).frontier.release_target_s == 18.0
    assert load_config("", [s3, "storage.max_file_age_s=30"]).frontier.release_target_s == 38.0
    assert load_config("", [s3, "frontier.release_target_s=5"]).frontier.release_target_s == 5.0
    assert load_config("", ["frontier.release_target_s=0"]).frontier.release_target_s == 0.0


def test_set_values_are_read_as_toml_when_they_parse():
    assert parse_overrides(["a.b=1", "a.c=true", 'a.d=["x"]', "a.e=plain words"]) == {
        "a": {"b": 1, "c": True, "d": ["x"], "e": "plain words"}}


def test_printed_defaults_are_valid_toml_and_load_back_unchanged():
    text = defaults_as_toml()
    assert defaults_as_toml(load_config(text)) == text
    assert set(tomllib.loads(text)) == set(SECTIONS)


def test_the_demo_sets_the_few_host_latency_settings_and_the_defaults_stay_for_many_hosts():
    from crawler.demo import DEMO_SETTINGS

    job = load_config().job
    assert (job.bundle_time_ms, job.bundle_size, job.buffer_timeout_ms) == (100, 100, 100)
    demo = load_config("", DEMO_SETTINGS)
    assert (demo.job.bundle_time_ms, demo.job.buffer_timeout_ms) == (20, 10)
    assert demo.politeness.default_delay_s == 0.5
    # Kafka batches for many hosts; the demo sends and fetches at once, as the Kafka client does by default
    assert (job.kafka_linger_ms, job.kafka_fetch_min_bytes) == (50, 64 * 1024)
    assert (demo.job.kafka_linger_ms, demo.job.kafka_fetch_min_bytes) == (5, 1)
