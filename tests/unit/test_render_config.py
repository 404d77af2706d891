"""The `[render]` section of the crawl config (udfs.render_policy.RenderPolicy, decision 3905): loaded with
its defaults, overridden and checked like every section, and checked against the frontier's lease."""
from __future__ import annotations

import tomllib

import pytest

from udfs.config import SECTIONS, ConfigError, defaults_as_toml, load_config
from udfs.render_policy import RenderPolicy


def test_render_is_a_section_with_its_documented_defaults():
    assert SECTIONS["render"] == "udfs.render_policy:RenderPolicy"
    config = load_config()
    assert config.render == RenderPolicy() and config.render.enabled is False
    assert tomllib.loads(defaults_as_toml())["render"]["page_timeout_s"] == 15.0   # `crawler config` prints it


def test_render_values_are_overridden_from_toml_and_set():
    config = load_config("[render]\nenabled = true\nmax_share = 0.1\n", ["render.page_timeout_s=20"])
    assert (config.render.enabled, config.render.max_share, config.render.page_timeout_s) == (True, 0.1, 20.0)


@pytest.mark.parametrize("overrides, words", [
    (["render.nosuch=1"], "[render] unknown key(s) nosuch"),
    (["render.enabled=yes"], "render.enabled: expected true or false"),
    (["render.max_share=2"], "render.max_share must be a share within [0, 1]"),
])
def test_bad_render_values_are_refused_naming_the_key(overrides, words):
    with pytest.raises(ConfigError) as err:
        load_config("", overrides)
    assert words in str(err.value)


def test_an_enabled_render_must_fit_its_fetch_and_render_in_one_lease():
    with pytest.raises(ConfigError) as err:
        load_config("", ["render.enabled=true", "fetch.total_timeout_s=30", "render.page_timeout_s=30"])
    message = str(err.value)
    assert "fetch.total_timeout_s (30.0) + render.page_timeout_s (30.0)" in message
    assert "frontier.lease_timeout_s (60.0)" in message and "render.enabled" in message
    # equal is not below
    with pytest.raises(ConfigError):
        load_config("", ["render.enabled=true", "fetch.total_timeout_s=45", "render.page_timeout_s=15"])
    # a longer lease makes room; a disabled tier is not checked
    assert load_config("", ["render.enabled=true", "fetch.total_timeout_s=30", "render.page_timeout_s=30",
                            "frontier.lease_timeout_s=90"]).render.enabled
    assert not load_config("", ["fetch.total_timeout_s=30", "render.page_timeout_s=30"]).render.enabled


def test_the_frontier_renders_only_with_an_enabled_section():
    from operators.frontier import FrontierFunction
    assert FrontierFunction().config.render_on is False
    assert FrontierFunction(render=RenderPolicy()).config.render_on is False
    assert FrontierFunction(render=load_config("", ["render.enabled=true"]).render).config.render_on is True
