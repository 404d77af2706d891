"""The SSRF address classifier: every category, IPv4 embedded in IPv6, allow and deny ranges (deny wins)."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.netguard import (CATEGORIES, PUBLIC, FetchPolicy, address_category, classify_address, classify_host_name,
                           parse_cidrs)

# (address, category) — one or more rows per category of the IANA special-purpose registries.
CATEGORY_TABLE = [
    ("8.8.8.8", "public"),
    ("93.184.216.34", "public"),
    ("2606:4700:4700::1111", "public"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fd12:3456::1", "private"),
    ("fc00::1", "private"),
    ("fec0::1", "private"),
    ("100.64.0.1", "shared"),
    ("100.127.255.254", "shared"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("169.254.0.1", "link_local"),
    ("fe80::1", "link_local"),
    ("169.254.169.254", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("168.63.129.16", "metadata"),     # Azure WireServer: a public address, refused all the same
    ("192.0.0.192", "metadata"),       # Oracle Cloud, inside the IETF protocol block
    ("169.254.170.2", "metadata"),     # AWS ECS task credentials
    ("fd20:ce::254", "metadata"),      # GCP over IPv6
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.0.8", "reserved"),
    ("192.88.99.1", "reserved"),
    ("100::1", "reserved"),
    ("2001:2::1", "reserved"),
    ("4000::1", "reserved"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("198.18.0.1", "benchmark"),
    ("198.19.255.255", "benchmark"),
    ("::ffff:127.0.0.1", "ipv4_mapped"),
    ("::ffff:8.8.8.8", "ipv4_mapped"),
    ("::127.0.0.1", "ipv4_compatible"),
    ("64:ff9b::8.8.8.8", "ipv4_translated"),
    ("64:ff9b:1::1", "ipv4_translated"),
    ("2002:7f00:1::", "tunnel"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "tunnel"),
]


@pytest.mark.parametrize("address, category", CATEGORY_TABLE)
def test_each_address_falls_in_its_special_purpose_category(address: str, category: str) -> None:
    assert address_category(ipaddress.ip_address(address)) == category


def test_the_table_covers_every_category() -> None:
    assert {category for _, category in CATEGORY_TABLE} == CATEGORIES


@pytest.mark.parametrize("address, category", CATEGORY_TABLE)
def test_by_default_only_public_addresses_are_allowed(address: str, category: str) -> None:
    verdict = classify_address(address)
    assert verdict.allowed is (category == PUBLIC)
    assert verdict.category == category
    assert verdict.allowed or address.split("%")[0] in verdict.reason or category in verdict.reason.replace("-", "_")


LOOPBACK_TEST = parse_cidrs(("127.0.0.0/8",), "allow"), parse_cidrs(("127.0.0.64/26",), "deny")


@pytest.mark.parametrize("address, allowed, why", [
    ("127.0.0.1", True, "allow range 127.0.0.0/8"),
    ("127.0.0.63", True, "allow range"),
    ("127.0.0.64", False, "deny range 127.0.0.64/26"),
    ("127.0.0.127", False, "deny range"),
    ("127.0.0.128", True, "allow range"),
    ("::ffff:127.0.0.70", False, "deny range"),        # the embedded IPv4 address is denied too
    ("::ffff:127.0.0.1", False, "ipv4-mapped"),        # mapped is its own category, not re-admitted
    ("2002:7f00:0046::", False, "deny range"),         # 6to4 embedding 127.0.0.70
    ("::1", False, "loopback"),                        # the allow range is IPv4 only
    ("10.0.0.1", False, "private"),
    ("8.8.8.8", True, ""),
])
def test_allow_range_readmits_and_deny_range_wins(address: str, allowed: bool, why: str) -> None:
    verdict = classify_address(address, *LOOPBACK_TEST)
    assert verdict.allowed is allowed and why in verdict.reason


def test_deny_range_refuses_public_addresses_too() -> None:
    assert not classify_address("8.8.8.8", deny=parse_cidrs(("8.8.8.0/24",), "deny")).allowed


def test_deny_wins_even_when_the_same_range_is_allowed() -> None:
    same = parse_cidrs(("127.0.0.0/8",), "x")
    assert not classify_address("127.0.0.1", allow=same, deny=same).allowed


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "168.63.129.16",
                                     "192.0.0.192", "169.254.170.2", "169.254.170.23", "169.254.0.23",
                                     "fd00:ec2::23", "fd20:ce::254",
                                     "::ffff:168.63.129.16", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1"])
def test_metadata_addresses_are_never_readmitted_by_an_allow_range(address: str) -> None:
    everything = parse_cidrs(("0.0.0.0/0", "::/0"), "allow")
    verdict = classify_address(address, allow=everything)
    assert not verdict.allowed and verdict.category == "metadata"


@pytest.mark.parametrize("text", ["", "localhost", "999.1.1.1", "1.2.3", "::g", "http://1.2.3.4/", "\x00"])
def test_text_that_is_not_an_address_is_refused_without_raising(text: str) -> None:
    verdict = classify_address(text)
    assert not verdict.allowed and verdict.category == "invalid"


@pytest.mark.parametrize("address", ["[::1]", " 127.0.0.1 ", "fe80::1%eth0"])
def test_bracketed_padded_and_scoped_forms_are_classified(address: str) -> None:
    assert classify_address(address).category in {"loopback", "link_local"}


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.ip_addresses(), st.text(max_size=40)))
def test_classifier_never_raises_and_allows_only_public(value: object) -> None:
    verdict = classify_address(str(value))
    assert verdict.allowed is (verdict.category == PUBLIC)


@settings(max_examples=300, deadline=None)
@given(st.ip_addresses(v=4))
def test_every_ipv4_mapped_address_is_refused_by_default(address: ipaddress.IPv4Address) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert not classify_address(str(mapped)).allowed


def test_policy_classify_uses_its_ranges() -> None:
    policy = FetchPolicy(allow_cidrs=("127.0.0.0/8",), deny_cidrs=("127.0.0.64/26",))
    assert policy.classify("127.0.0.2").allowed and not policy.classify("127.0.0.66").allowed


@pytest.mark.parametrize("name", ["metadata.google.internal", "METADATA.Google.Internal.", "metadata.goog",
                                  "metadata", "instance-data", "instance-data.ec2.internal",
                                  "metadata.tencentyun.com"])
def test_cloud_metadata_host_names_are_refused_before_resolution(name: str) -> None:
    verdict = classify_host_name(name)
    assert not verdict.allowed and verdict.category == "metadata"


@pytest.mark.parametrize("name", ["example.com", "metadata.example.com", "google.internal", "my-metadata"])
def test_other_host_names_wait_for_their_addresses(name: str) -> None:
    assert classify_host_name(name).allowed
