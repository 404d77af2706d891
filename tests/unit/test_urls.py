"""udfs.urls: the policy switches, the slot key, registrable domains and fingerprints."""
from __future__ import annotations

import dataclasses
import socket

import pytest

from udfs import urls
from udfs.config import ConfigError, build_section
from udfs.urls import DEFAULT_URL_POLICY, UrlPolicy, host_key, normalize_url, registrable_domain, url_fp

# --- UrlPolicy ---------------------------------------------------------------------------------


def test_default_policy_values_are_the_documented_ones() -> None:
    assert DEFAULT_URL_POLICY == UrlPolicy(
        max_length=2048, sort_query=True, strip_tracking=True, strip_session_ids=True, merge_slashes=True,
        extra_strip_params=frozenset(), keep_params=frozenset(), default_scheme=None)


def test_policy_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_URL_POLICY.max_length = 10  # type: ignore[misc]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_length": 8}, "max_length must be within"),
    ({"max_length": True}, "max_length must be an integer"),
    ({"max_length": "2048"}, "max_length must be an integer"),
    ({"sort_query": 1}, "sort_query must be true or false"),
    ({"merge_slashes": None}, "merge_slashes must be true or false"),
    ({"extra_strip_params": "ref"}, "extra_strip_params must be a set"),
    ({"extra_strip_params": frozenset({""})}, "extra_strip_params must be a set"),
    ({"keep_params": frozenset({"UTM_ID"})}, "keep_params must be lower case"),
    ({"default_scheme": "ftp"}, "default_scheme must be"),
])
def test_policy_rejects_invalid_values_with_a_message_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        UrlPolicy(**kwargs)


def test_policy_loads_from_config_section_and_rejects_unknown_keys() -> None:
    policy = build_section("urls", {"sort_query": False, "extra_strip_params": ["ref"]})
    assert policy == UrlPolicy(sort_query=False, extra_strip_params=frozenset({"ref"}))
    with pytest.raises(ConfigError, match="unknown key"):
        build_section("urls", {"sort_params": False})
    with pytest.raises(ConfigError, match="max_length"):
        build_section("urls", {"max_length": 1})


# --- normalize_url: switches and rules beyond the public suites --------------------------------

def test_tracking_parameters_are_stripped_case_insensitively() -> None:
    url = "https://ex.com/a?UTM_Source=x&id=7&gclid=1&fbclid=2&mc_cid=3&_ga=4&msclkid=5&utm_campaign=y"
    assert normalize_url(url) == "https://ex.com/a?id=7"


def test_percent_encoded_tracking_name_is_stripped_after_decoding() -> None:
    assert normalize_url("https://ex.com/?utm%5Fsource=x&a=1") == "https://ex.com/?a=1"


def test_strip_tracking_off_keeps_them() -> None:
    assert normalize_url("https://ex.com/?utm_source=x", policy=UrlPolicy(strip_tracking=False)) \
        == "https://ex.com/?utm_source=x"


def test_extra_strip_params_and_keep_params() -> None:
    policy = UrlPolicy(extra_strip_params=frozenset({"ref"}), keep_params=frozenset({"utm_id"}))
    assert normalize_url("https://ex.com/?ref=home&utm_id=9&utm_medium=m&q=1", policy=policy) \
        == "https://ex.com/?q=1&utm_id=9"


def test_jsessionid_path_parameter_is_stripped() -> None:
    assert normalize_url("http://ex.com/shop/item;jsessionid=0A1B2C.node1?id=3") == "http://ex.com/shop/item?id=3"


def test_session_id_of_another_shape_is_kept() -> None:
    assert normalize_url("http://ex.com/?sid=42") == "http://ex.com/?sid=42"


def test_strip_session_ids_off_keeps_them() -> None:
    url = "http://ex.com/a;jsessionid=X?phpsessid=0123456789abcdefghijklemopqrstuv"
    assert normalize_url(url, policy=UrlPolicy(strip_session_ids=False)) == url


def test_sort_query_off_keeps_pair_order() -> None:
    assert normalize_url("http://ex.com/?b=1&a=2", policy=UrlPolicy(sort_query=False)) == "http://ex.com/?b=1&a=2"


def test_query_sort_is_stable_for_repeated_names() -> None:
    assert normalize_url("http://ex.com/?id=2&b=1&id=1") == "http://ex.com/?b=1&id=2&id=1"


def test_merge_slashes_off_keeps_empty_segments() -> None:
    assert normalize_url("http://ex.com//a//b", policy=UrlPolicy(merge_slashes=False)) == "http://ex.com//a//b"


def test_characters_rfc3986_forbids_are_escaped_in_path_and_query() -> None:
    assert normalize_url("http://ex.com/a|b[c]?q=^x`{y}") == "http://ex.com/a%7Cb%5Bc%5D?q=%5Ex%60%7By%7D"


def test_sub_delimiter_escapes_stay_escaped() -> None:
    # RFC 3986 §2.2: "%26" and "&" differ, so do "%2C" and ",": only unreserved escapes are decoded.
    assert normalize_url("http://ex.com/a%2cb%7e?x=a%26b%3d") == "http://ex.com/a%2Cb~?x=a%26b%3D"


def test_default_scheme_lets_a_schemeless_seed_through() -> None:
    policy = UrlPolicy(default_scheme="https")
    assert normalize_url("Example.com/index.html", policy=policy) == "https://example.com/index.html"
    assert normalize_url("example.com/index.html") is None
    assert normalize_url("mailto:a@b.c", policy=policy) is None


@pytest.mark.parametrize("url", [
    "javascript:void(0)", "mailto:a@example.com", "tel:+123", "ftp://ex.com/", "data:text/html,x",
    "file:///etc/passwd", "ws://ex.com/", "http://", "https:///", "http://./", "http://ex..com/",
    "http://.ex.com/", "http://" + "a" * 64 + ".com/", "http://" + "a." * 127 + "com/", "",
    "http://ex ample.com/", "http://[::1/", "http://ex.com:99999/", "//ex.com/", "/relative",
])
def test_unfetchable_urls_normalize_to_none(url: str) -> None:
    assert normalize_url(url) is None


def test_max_length_is_inclusive() -> None:
    head = "http://ex.com/"
    assert normalize_url(head + "a" * (2048 - len(head))) is not None
    assert normalize_url(head + "a" * (2049 - len(head))) is None
    assert normalize_url(head + "a" * 100, policy=UrlPolicy(max_length=64)) is None


def test_huge_input_is_rejected() -> None:
    assert normalize_url("http://ex.com/" + "a" * 1_000_000) is None


def test_relative_link_resolves_against_base() -> None:
    assert normalize_url("../c?b=2&a=1#top", "https://Ex.com/x/y/z") == "https://ex.com/x/c?a=1&b=2"


def test_broken_base_still_lets_absolute_links_through() -> None:
    assert normalize_url("http://ex.com/a", "not a url") == "http://ex.com/a"
    assert normalize_url("/a", "not a url") is None
    assert normalize_url("/a", None) is None


@pytest.mark.parametrize(("url", "expected"), [
    ("http://0x7f.0.0.1/", "http://127.0.0.1/"),
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://[0:0::1]:8080/", "http://[::1]:8080/"),
    ("https://Bücher.example:443/", "https://xn--bcher-kva.example/"),
    ("http://ex.com.:8080/", "http://ex.com:8080/"),
])
def test_hosts_are_canonical(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(("url", "base", "expected"), [
    ("http://user:pw@ex.com/a", None, "http://ex.com/a"),
    ("https://user@Ex.com:8443/a?b=1", None, "https://ex.com:8443/a?b=1"),
    ("http://:pw@ex.com", None, "http://ex.com/"),
    ("http://a%40b:c%3Ad@ex.com./x", None, "http://ex.com/x"),
    ("http://u:p@[::1]:81/x", None, "http://[::1]:81/x"),
    ("http://u:p@10.0.0.1/", None, "http://10.0.0.1/"),
    ("/next", "http://u:p@ex.com/a", "http://ex.com/next"),
    ("//u:p@ex.org/b", "https://ex.com/", "https://ex.org/b"),
    ("http://ex.com/a@b?c=d@e", None, "http://ex.com/a@b?c=d@e"),   # an `@` after the host is no userinfo
])
def test_userinfo_is_dropped(url: str, base: str | None, expected: str) -> None:
    assert normalize_url(url, base) == expected


@pytest.mark.parametrize("value", [None, b"http://ex.com/", 42, "http://ex.com/\ud800", "\x00" * 10])
def test_never_raises_on_hostile_values(value: object) -> None:
    result = normalize_url(value)  # type: ignore[arg-type]
    assert result is None or result.startswith("http://")


def test_lone_surrogate_becomes_replacement_character() -> None:
    assert normalize_url("http://ex.com/a\ud800b") == "http://ex.com/a%EF%BF%BDb"


# --- host_key ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "key"), [
    ("http://ex.com/a", "ex.com"),
    ("https://ex.com/a", "ex.com"),
    ("https://ex.com:8443/a?b", "ex.com:8443"),
    ("http://user:pw@ex.com:81", "ex.com:81"),
    ("http://[::1]:8080/", "[::1]:8080"),
    ("http://127.0.0.1/x", "127.0.0.1"),
    ("http://ex.com?q=a/b", "ex.com"),
])
def test_host_key_is_host_and_non_default_port(url: str, key: str) -> None:
    assert host_key(url) == key


def test_host_key_of_normalised_urls_ignores_default_port_and_case() -> None:
    assert host_key(normalize_url("HTTP://EX.com:80/")) == host_key(normalize_url("https://ex.COM:443/x")) == "ex.com"


@pytest.mark.parametrize("url", ["ftp://ex.com/", "ex.com/a", ""])
def test_host_key_rejects_non_http_urls(url: str) -> None:
    with pytest.raises(ValueError, match="normalised http"):
        host_key(url)


# --- registrable_domain ---------------------------------------------------------------------------

@pytest.mark.parametrize(("host", "domain"), [
    ("www.example.com", "example.com"),
    ("a.b.example.co.uk", "example.co.uk"),
    ("WWW.Example.COM", "example.com"),
    ("news.example.com:8080", "example.com"),
    ("foo.github.io", "github.io"),            # ICANN section only (decision 0102)
    ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1:8080", "127.0.0.1"),
    ("[::1]:8080", "[::1]"),
    ("localhost", "localhost"),
    ("co.uk", "co.uk"),
    ("h0001.s0001.test", "s0001.test"),        # an unknown TLD is a suffix (the list's rule "*")
    ("s0001.test:8080", "s0001.test"),
    ("a.b.c.internal", "c.internal"),
    ("10.1.2.3", "10.1.2.3"),
])
def test_registrable_domain(host: str, domain: str) -> None:
    assert registrable_domain(host) == domain


def test_registrable_domain_uses_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(urls, "_extractor", None)
    urls._registrable.cache_clear()
    assert registrable_domain("shop.example.org") == "example.org"


# --- url_fp --------------------------------------------------------------------------------------

def test_url_fp_is_pinned() -> None:
    """Fingerprints live in Flink state and Kafka keys: a changed value would orphan all of them."""
    assert url_fp("http://example.com/") == 6245505087419029509
    assert url_fp("https://example.com/") == 5355376737291618849


def test_url_fp_is_unsigned_64_bit_and_distinguishes_urls() -> None:
    fps = {url_fp(f"http://example.com/{i}") for i in range(1000)}
    assert len(fps) == 1000
    assert all(0 <= fp < 2**64 for fp in fps)


def test_parameters_that_merely_look_like_trackers_are_kept() -> None:
    assert normalize_url("https://ex.com/?pk_id=5&utm=1&sid=7") == "https://ex.com/?pk_id=5&sid=7&utm=1"
