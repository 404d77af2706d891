"""The host frontier's config record (operators.frontier_config), its feature questions, the checks made
when a HostFrontier is built, and the per-host rules cache (operators.host_rules_cache)."""
from __future__ import annotations

import dataclasses

import pytest

from operators.frontier import FrontierFunction
from operators.frontier_config import DEFAULT_HOST_FRONTIER_CONFIG, HostFrontierConfig
from operators.host_frontier import HostFrontier
from operators.host_rules_cache import RulesByHost, stored_body
from tests.frontier_harness import Map, PrefixRules, Value
from udfs.budgets import BudgetPolicy
from udfs.optout import OptOutPolicy
from udfs.recrawl import RecrawlPolicy
from udfs.records import b64
from udfs.sitemaps import SitemapPolicy
from udfs.soft404 import Soft404Policy


def _frontier(config: HostFrontierConfig, due: Map | None = None) -> HostFrontier:
    return HostFrontier(Value(), Value(), Map(), Map(), lambda name: None, PrefixRules, config, due=due)


def test_by_default_every_optional_feature_is_off():
    config = DEFAULT_HOST_FRONTIER_CONFIG
    assert not (config.recrawl_on or config.soft404_on or config.budgets_on or config.census_on
                or config.sitemaps_on)


def test_each_policy_given_turns_its_feature_on():
    config = HostFrontierConfig(recrawl=RecrawlPolicy(), soft404=Soft404Policy(), budgets=BudgetPolicy(),
                                census=True, sitemaps=SitemapPolicy())
    assert config.recrawl_on and config.soft404_on and config.budgets_on and config.census_on and config.sitemaps_on


def test_domain_shares_are_asked_for_only_with_budgets():
    assert HostFrontierConfig(census=True).census_on is False


def test_tdmrep_leases_and_ai_agents_follow_the_optout_policy():
    assert HostFrontierConfig(optout=OptOutPolicy()).tdmrep_on is True
    assert HostFrontierConfig(optout=OptOutPolicy(fetch_tdmrep=False)).tdmrep_on is False
    assert HostFrontierConfig(optout=OptOutPolicy()).ai_agents == OptOutPolicy().ai_agents
    assert HostFrontierConfig(optout=OptOutPolicy(use_robots=False)).ai_agents == ()


def test_more_recrawl_tiers_than_the_frontier_has_queues_are_refused():
    tiers = dataclasses.replace(RecrawlPolicy(), tiers=11)
    with pytest.raises(ValueError, match="recrawl.tiers must be at most 10"):
        HostFrontierConfig(recrawl=tiers)


def test_recrawl_and_the_due_bucket_state_come_together():
    with pytest.raises(ValueError, match="due-bucket state"):
        _frontier(HostFrontierConfig(recrawl=RecrawlPolicy()))
    with pytest.raises(ValueError, match="due-bucket state"):
        _frontier(HostFrontierConfig(), due=Map())
    assert _frontier(HostFrontierConfig(recrawl=RecrawlPolicy()), due=Map()).config.recrawl_on


def test_tdmrep_is_leased_only_with_a_state_for_its_body():
    config = HostFrontierConfig(optout=OptOutPolicy())
    assert _frontier(config).leases_tdmrep is False
    assert HostFrontier(Value(), Value(), Map(), Map(), lambda name: None, PrefixRules, config,
                        tdmrep_body=Value()).leases_tdmrep is True


def test_the_operator_builds_its_record_once_with_recrawl_on():
    config = FrontierFunction(soft404=Soft404Policy()).config
    assert config.recrawl_on and config.soft404_on and not config.budgets_on and not config.tdmrep_on


def test_cached_rules_hold_only_for_the_expiry_they_were_parsed_under():
    cache: RulesByHost[str] = RulesByHost(2)
    cache.put("a.example", 10.0, "rules a")
    assert cache.get("a.example", 10.0) == "rules a"
    assert cache.get("a.example", 20.0) is None     # a refreshed file is parsed again
    cache.drop("a.example")
    assert cache.get("a.example", 10.0) is None


def test_the_least_recently_used_host_leaves_the_cache_first():
    cache: RulesByHost[str] = RulesByHost(2)
    cache.put("a.example", 1.0, "a")
    cache.put("b.example", 1.0, "b")
    assert cache.get("a.example", 1.0) == "a"
    cache.put("c.example", 1.0, "c")
    assert cache.get("b.example", 1.0) is None and cache.get("a.example", 1.0) == "a"


@pytest.mark.parametrize("kept, body", [(b64(b"User-agent: *"), b"User-agent: *"), (None, b""),
                                        ("not base64 \u00e9", b"")])
def test_a_stored_body_that_cannot_be_read_is_an_empty_body(kept, body):
    assert stored_body(kept) == body
