"""Parsed robots.txt rules keyed by the body (udfs/robots_cache.py, decision 1613): one parse per
distinct body, shared by every host serving it; bounded, least recently used out first."""
from __future__ import annotations

import pytest

from udfs.robots import parse_robots
from udfs.robots_cache import RulesByBody

SHARED = b"User-agent: *\nDisallow: /private\n"
OTHER = b"User-agent: *\nDisallow: /\n"


def test_hosts_serving_the_same_body_share_one_parse() -> None:
    parsed: list[bytes] = []
    cache = RulesByBody(lambda body: parsed.append(body) or parse_robots(body))
    first, second = cache(SHARED), cache(bytes(SHARED))
    assert first is second and parsed == [SHARED]
    assert not first.allowed("https://a.test/private/x", "crawler") and first.allowed("https://a.test/", "crawler")
    assert cache(OTHER) is not first and not cache(OTHER).allowed("https://b.test/", "crawler")
    assert (cache.hits, cache.misses, len(cache)) == (2, 2, 2)


def test_the_least_recently_used_body_is_parsed_again_after_eviction() -> None:
    parsed: list[bytes] = []
    cache = RulesByBody(lambda body: parsed.append(body) or parse_robots(body), size=2)
    third = b"User-agent: *\nCrawl-delay: 3\n"
    cache(SHARED), cache(OTHER), cache(SHARED), cache(third)   # OTHER is the least recently used
    assert len(cache) == 2
    cache(SHARED)
    cache(OTHER)
    assert parsed == [SHARED, OTHER, third, OTHER]


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_a_bad_size_is_refused_naming_it(size: object) -> None:
    with pytest.raises(ValueError, match="size must be an integer"):
        RulesByBody(parse_robots, size=size)  # type: ignore[arg-type]
