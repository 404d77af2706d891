"""The renders' shared sub-resource cache: fresh for max-age, revalidated with validators when stale,
never holding what a response forbids, bounded in bytes."""
from __future__ import annotations

import pytest

from udfs.subresource_cache import SubresourceCache, freshness

JS = "http://a.test/static/app.js"


def cc(value: str, *more: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return (("Cache-Control", value), *more)


@pytest.mark.parametrize("headers, seconds", [
    (cc("max-age=600"), 600.0),
    (cc("public, max-age=600, s-maxage=60"), 60.0),      # a shared cache reads s-maxage first
    (cc("max-age=999999999"), 86_400.0),                 # capped
    (cc("no-cache"), 0.0),
    (cc("no-store"), None),
    (cc("private, max-age=600"), None),
    ((), 0.0),
])
def test_freshness_follows_cache_control(headers, seconds):
    assert freshness(headers, 86_400.0) == seconds


def test_a_fresh_entry_is_a_hit_and_a_stale_one_is_revalidated_with_its_validators():
    cache = SubresourceCache()
    assert cache.store(JS, 200, cc("max-age=60", ("ETag", '"v1"'), ("Last-Modified", "Sun, 06 Dec 2026 10:00:00 GMT")),
                       b"code", now=0.0)
    assert cache.lookup(JS, 30.0).hit.body == b"code"
    stale = cache.lookup(JS, 61.0)
    assert stale.hit is None and stale.conditional == (("If-None-Match", '"v1"'),
                                                       ("If-Modified-Since", "Sun, 06 Dec 2026 10:00:00 GMT"))
    assert cache.revalidated(JS, cc("max-age=120"), 61.0).body == b"code"
    assert cache.lookup(JS, 150.0).hit is not None and cache.lookup(JS, 182.0).hit is None
    assert (cache.hits, cache.misses, cache.revalidations) == (2, 2, 1)


@pytest.mark.parametrize("status, headers, body", [
    (200, cc("no-store"), b"x"),
    (404, cc("max-age=60"), b"x"),
    (200, (), b"x"),                                  # no lifetime and nothing to revalidate with
    (200, cc("max-age=60"), b"x" * (5 * 1024 * 1024 + 1)),
])
def test_what_may_not_be_kept_is_not(status, headers, body):
    cache = SubresourceCache()
    assert not cache.store(JS, status, headers, body, now=0.0) and len(cache) == 0


def test_the_least_recently_used_go_first_past_the_byte_bound():
    cache = SubresourceCache(max_bytes=10)
    for name in "abc":
        cache.store(f"http://a.test/{name}.js", 200, cc("max-age=60"), b"12345", now=0.0)
    assert cache.lookup("http://a.test/a.js", 1.0).hit is None   # gone: b and c fill the 10 bytes
    assert cache.lookup("http://a.test/b.js", 1.0).hit is not None
    cache.store("http://a.test/d.js", 200, cc("max-age=60"), b"12345", now=1.0)
    assert cache.lookup("http://a.test/c.js", 1.0).hit is None and cache.lookup("http://a.test/b.js", 1.0).hit


def test_a_304_that_forbids_storing_drops_the_entry():
    cache = SubresourceCache()
    cache.store(JS, 200, cc("no-cache", ("ETag", '"v1"')), b"code", now=0.0)
    assert cache.lookup(JS, 0.0).conditional == (("If-None-Match", '"v1"'),)
    assert cache.revalidated(JS, cc("no-store"), 1.0).body == b"code" and len(cache) == 0
