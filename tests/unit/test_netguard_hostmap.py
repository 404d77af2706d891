"""Host map parsing: `hostname ip` and /etc/hosts lines, comments, and every error reported by line."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.netguard import HostMapError, normalize_hostname, parse_host_map


def test_hostname_first_and_address_first_lines_both_parse() -> None:
    text = "site-a.test 127.0.0.11\n127.0.0.12 site-b.test www.site-b.test\n"
    assert parse_host_map(text) == {
        "site-a.test": ("127.0.0.11",), "site-b.test": ("127.0.0.12",), "www.site-b.test": ("127.0.0.12",)}


def test_comments_blank_lines_case_and_trailing_dots_are_handled() -> None:
    text = "# the synthetic web\n\n   \nSite.TEST. 127.0.0.5   # inline comment\n"
    assert parse_host_map(text) == {"site.test": ("127.0.0.5",)}


def test_a_name_on_several_lines_keeps_every_address_once_in_file_order() -> None:
    text = "multi.test 127.0.0.2\nmulti.test ::1\nmulti.test 127.0.0.2\n"
    assert parse_host_map(text) == {"multi.test": ("127.0.0.2", "::1")}


def test_ipv6_addresses_are_canonicalised_and_brackets_accepted() -> None:
    assert parse_host_map("v6.test [0:0:0:0:0:0:0:1]") == {"v6.test": ("::1",)}


def test_empty_text_is_an_empty_map() -> None:
    assert parse_host_map("") == {}


@pytest.mark.parametrize("line, message", [
    ("just-a-name", "expected exactly one IP address, found none"),
    ("127.0.0.1", "no host name"),
    ("a.test 127.0.0.1 127.0.0.2", "expected exactly one IP address, found 2"),
    ("bad..name 127.0.0.1", "not a host name: 'bad..name'"),
    ("-leading.test 127.0.0.1", "not a host name"),
    ("under_score.test 127.0.0.1 sp@ce", "not a host name: 'sp@ce'"),
    (f"{'a' * 64}.test 127.0.0.1", "not a host name"),
])
def test_malformed_lines_are_reported_with_their_number(line: str, message: str) -> None:
    with pytest.raises(HostMapError) as caught:
        parse_host_map(f"ok.test 127.0.0.1\n{line}\n")
    assert f"line 2: {message}" in str(caught.value)


def test_every_malformed_line_is_reported_at_once() -> None:
    with pytest.raises(HostMapError) as caught:
        parse_host_map("one\nok.test 127.0.0.1\ntwo 1.1.1.1 2.2.2.2\n1.1.1.1\n")
    lines = str(caught.value).splitlines()
    assert [line.split(":")[0] for line in lines[1:]] == ["line 1", "line 3", "line 4"]


def test_host_map_error_is_a_value_error() -> None:
    assert issubclass(HostMapError, ValueError)


@pytest.mark.parametrize("name, expected", [
    ("Example.COM", "example.com"), ("example.com.", "example.com"), ("xn--bcher-kva.test", "xn--bcher-kva.test"),
    ("", None), (".", None), ("a..b", None), ("-a.b", None), ("a-.b", None), ("a b", None), ("a" * 254, None),
])
def test_normalize_hostname(name: str, expected: str | None) -> None:
    assert normalize_hostname(name) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parser_either_parses_or_raises_host_map_error(text: str) -> None:
    try:
        pins = parse_host_map(text)
    except HostMapError:
        return
    assert all(addresses for addresses in pins.values())
