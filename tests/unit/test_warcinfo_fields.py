"""What each WARC file's warcinfo says about the crawl: its name, the machine, the operator, the robots
policy and the User-Agent (WARC 1.1 §6.2, the IIPC's guidelines)."""
from __future__ import annotations

import pytest

from udfs.config import load_config
from udfs.warc import ROBOTS_POLICY, WarcBuilder, WarcPolicy, crawl_warcinfo_fields


def test_the_fields_name_the_crawl_the_host_the_robots_policy_and_the_user_agent():
    fields = crawl_warcinfo_fields(WarcPolicy(is_part_of="news-2026-12"), "Bot/1 (+https://b.example)", "tm-3")
    assert fields == (("isPartOf", "news-2026-12"), ("hostname", "tm-3"), ("robots", ROBOTS_POLICY),
                      ("http-header-user-agent", "Bot/1 (+https://b.example)"))


def test_an_operator_is_written_only_when_configured():
    fields = dict(crawl_warcinfo_fields(WarcPolicy(operator="Web team <web@example.org>"), "Bot/1", "h"))
    assert fields["operator"] == "Web team <web@example.org>"
    assert "operator" not in dict(crawl_warcinfo_fields(WarcPolicy(), "Bot/1", "h"))


def test_the_fields_land_in_the_warcinfo_block_after_software_and_format():
    fields = crawl_warcinfo_fields(WarcPolicy(), "Bot/1 (+https://b.example)", "h")
    record = WarcBuilder().warcinfo("x.warc.gz", fields, date=0.0)
    written = record.to_bytes()
    for name, value in [("software", WarcPolicy().software), *fields]:
        assert f"{name}: {value}".encode() in written


@pytest.mark.parametrize("setting, message", [('warc.is_part_of=""', "is_part_of"),
                                              ('warc.operator="a\\nb"', "operator")])
def test_bad_crawl_fields_are_refused_with_their_name(setting, message):
    with pytest.raises(Exception, match=message):
        load_config("", [setting])


def test_the_configuration_carries_the_crawl_name_and_operator():
    config = load_config("", ['warc.is_part_of="weekly"', 'warc.operator="ops@example.org"'])
    assert (config.warc.is_part_of, config.warc.operator) == ("weekly", "ops@example.org")
