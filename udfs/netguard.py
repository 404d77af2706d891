"""Which addresses the fetcher may connect to, where host names point, and the fetch limits.

Three pure pieces the fetch operator (`operators/fetch.py`) applies before and during each request:

- `classify_address(ip, policy)`: the SSRF guard (docs/architecture.md §1 "fetch ─ caching resolver → SSRF
  guard"). Every address falls in one category of the IANA special-purpose registries; only `public`
  is allowed by default. `allow_cidrs` re-admit ranges (tests allow 127.0.0.0/8), `deny_cidrs` refuse
  ranges and always win. Cloud metadata addresses are never re-admitted by an allow range, and cloud
  metadata host names (`classify_host_name`) are refused before they are resolved.
- `parse_host_map(text)`: static name → address pins (`/etc/hosts` or `hostname ip` lines), consulted
  before DNS; every malformed line is reported with its number.
- `FetchPolicy`: timeouts, size caps, content types, user agent (docs/architecture.md §7 limits).
"""
from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PUBLIC: Final = "public"

# Ordered: the first range containing an address names its category, so narrower ranges come first
# (the metadata address before link-local, Teredo before the IETF protocol block).
_CATEGORY_RANGES: Final[tuple[tuple[str, str], ...]] = (
    ("169.254.169.254/32", "metadata"),       # AWS/GCP/Azure/OpenStack/Oracle/DigitalOcean instance metadata
    ("169.254.170.2/32", "metadata"),         # AWS ECS task metadata and credentials
    ("169.254.170.23/32", "metadata"),        # AWS EKS Pod Identity credentials
    ("169.254.0.23/32", "metadata"),          # Tencent Cloud metadata (metadata.tencentyun.com)
    ("100.100.100.200/32", "metadata"),       # Alibaba Cloud metadata
    ("168.63.129.16/32", "metadata"),         # Azure WireServer / host agent (a public address)
    ("192.0.0.192/32", "metadata"),           # Oracle Cloud metadata (before the IETF block below)
    ("0.0.0.0/8", "unspecified"),             # "this network" (RFC 791)
    ("10.0.0.0/8", "private"),                # RFC 1918
    ("100.64.0.0/10", "shared"),              # carrier-grade NAT (RFC 6598)
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link_local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),             # IETF protocol assignments (RFC 6890)
    ("192.0.2.0/24", "documentation"),        # TEST-NET-1
    ("192.88.99.0/24", "reserved"),           # deprecated 6to4 relay anycast (RFC 7526)
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmark"),           # RFC 2544
    ("198.51.100.0/24", "documentation"),     # TEST-NET-2
    ("203.0.113.0/24", "documentation"),      # TEST-NET-3
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),              # class E
    ("fd00:ec2::254/128", "metadata"),        # AWS instance metadata over IPv6
    ("fd00:ec2::23/128", "metadata"),         # AWS EKS Pod Identity over IPv6
    ("fd20:ce::254/128", "metadata"),         # GCP metadata server over IPv6
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::ffff:0:0/96", "ipv4_mapped"),         # reaches the embedded IPv4 address on dual-stack sockets
    ("::/96", "ipv4_compatible"),             # deprecated (RFC 4291), same risk as mapped
    ("64:ff9b::/96", "ipv4_translated"),      # NAT64 well-known prefix (RFC 6052)
    ("64:ff9b:1::/48", "ipv4_translated"),    # local-use NAT64 (RFC 8215)
    ("100::/64", "reserved"),                 # discard-only (RFC 6666)
    ("2001::/32", "tunnel"),                  # Teredo: embeds an IPv4 address
    ("2001:db8::/32", "documentation"),
    ("2001::/23", "reserved"),                # IETF protocol assignments
    ("2002::/16", "tunnel"),                  # 6to4: embeds an IPv4 address
    ("3fff::/20", "documentation"),           # RFC 9637
    ("fc00::/7", "private"),                  # unique local
    ("fe80::/10", "link_local"),
    ("fec0::/10", "private"),                 # deprecated site-local
    ("ff00::/8", "multicast"),
)
_CATEGORY_NETWORKS: Final[tuple[tuple[IPNetwork, str], ...]] = tuple(
    (ipaddress.ip_network(cidr), category) for cidr, category in _CATEGORY_RANGES
)
_IPV6_GLOBAL_UNICAST: Final = ipaddress.ip_network("2000::/3")

CATEGORIES: Final[frozenset[str]] = frozenset({c for _, c in _CATEGORY_RANGES} | {PUBLIC})

# Host names of cloud metadata services: refused by name, before any pin or DNS answer is looked at,
# so a resolver (or a host map) that maps them elsewhere cannot make the guard miss them.
METADATA_HOST_NAMES: Final[frozenset[str]] = frozenset({
    "metadata.google.internal", "metadata.goog", "metadata",      # GCP (and its short name)
    "instance-data", "instance-data.ec2.internal",                 # AWS
    "metadata.tencentyun.com",                                     # Tencent Cloud
})


@dataclasses.dataclass(frozen=True)
class AddressVerdict:
    """The guard's answer for one address: allowed or not, the address's category and why."""

    allowed: bool
    category: str
    reason: str


def address_category(ip: IPAddress) -> str:
    """The special-purpose category of `ip` (IANA IPv4/IPv6 special-purpose registries), or "public".

    IPv6 outside 2000::/3 that no other row names is "reserved" (not yet allocated by IANA).
    """
    for network, category in _CATEGORY_NETWORKS:
        if ip.version == network.version and ip in network:
            return category
    if ip.version == 6 and ip not in _IPV6_GLOBAL_UNICAST:
        return "reserved"
    return PUBLIC


def parse_cidrs(cidrs: tuple[str, ...], what: str) -> tuple[IPNetwork, ...]:
    """Parse CIDR strings (host bits must be zero); raises ValueError naming `what` and the bad entry."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=True))
        except ValueError as exc:
            raise ValueError(f"{what}: {cidr!r} is not a CIDR range ({exc})") from None
    return tuple(networks)


def _matching(ip: IPAddress, networks: tuple[IPNetwork, ...]) -> IPNetwork | None:
    for network in networks:
        if ip.version == network.version and ip in network:
            return network
    return None


_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if ip.version != 6:
        return None
    assert isinstance(ip, ipaddress.IPv6Address)
    embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
    if embedded is None and ip in _NAT64:
        embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return embedded


def classify_address(
    ip: str | IPAddress,
    allow: tuple[IPNetwork, ...] = (),
    deny: tuple[IPNetwork, ...] = (),
) -> AddressVerdict:
    """Decide whether the fetcher may connect to `ip` (the SSRF guard, docs/architecture.md §1 fetch).

    Order: a `deny` range (also matched against the IPv4 address embedded in a mapped, 6to4, Teredo or
    NAT64 IPv6 address) refuses; then metadata addresses, embedded ones too, are refused whatever
    `allow` says; then an `allow`
    range admits; then only the "public" category is admitted. Never raises: text that is not an IP
    address is refused with category "invalid".
    """
    try:
        address = ip if isinstance(ip, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else ipaddress.ip_address(
            ip.strip().strip("[]"))
    except ValueError:
        return AddressVerdict(False, "invalid", f"{ip!r} is not an IP address")
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    category = address_category(address)
    embedded = _embedded_ipv4(address)
    for candidate in (address, embedded):
        denied_by = _matching(candidate, deny) if candidate is not None else None
        if denied_by is not None:
            return AddressVerdict(False, category, f"{address} is in deny range {denied_by}")
    if category == "metadata" or (embedded is not None and address_category(embedded) == "metadata"):
        return AddressVerdict(False, "metadata", f"{address} is a cloud metadata address")
    allowed_by = _matching(address, allow)
    if allowed_by is not None:
        return AddressVerdict(True, category, f"{address} is in allow range {allowed_by}")
    if category != PUBLIC:
        return AddressVerdict(False, category, f"{address} is a {category.replace('_', '-')} address")
    return AddressVerdict(True, category, "")


def classify_host_name(name: str) -> AddressVerdict:
    """The guard's answer for a host name before it is resolved: refused when it names a cloud metadata
    service (`METADATA_HOST_NAMES`, case and a trailing dot ignored); otherwise allowed, pending the
    check of every address it resolves to."""
    host = name.strip().lower().removesuffix(".")
    if host in METADATA_HOST_NAMES:
        return AddressVerdict(False, "metadata", f"{host} is a cloud metadata host name")
    return AddressVerdict(True, PUBLIC, "")


class HostMapError(ValueError):
    """A host map has malformed lines; the message lists each as `line N: why`."""


_HOSTNAME_LABEL: Final = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


def normalize_hostname(name: str) -> str | None:
    """Lower-case, strip one trailing dot; None if `name` is not a plausible DNS host name."""
    host = name.strip().lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253:
        return None
    if not all(_HOSTNAME_LABEL.match(label) for label in host.split(".")):
        return None
    return host


def _as_ip(token: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(token.strip("[]"))
    except ValueError:
        return None


def parse_host_map(text: str) -> dict[str, tuple[str, ...]]:
    """Parse static host pins: one address and one or more names per line, in either order.

    Accepts `hostname ip` lines and `/etc/hosts` lines (`ip name [alias...]`); `#` starts a comment,
    blank lines are skipped; a name listed on several lines keeps every address, in file order.
    Raises HostMapError listing every malformed line with its number (fetcher host resolution,
    docs/architecture.md §1 "caching resolver").
    """
    pins: dict[str, list[str]] = {}
    errors: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        addresses = [(t, a) for t, a in ((t, _as_ip(t)) for t in tokens) if a is not None]
        names = [t for t in tokens if _as_ip(t) is None]
        if len(addresses) != 1:
            found = "none" if not addresses else f"{len(addresses)}"
            errors.append(f"line {number}: expected exactly one IP address, found {found} in {raw.strip()!r}")
            continue
        if not names:
            errors.append(f"line {number}: no host name next to {addresses[0][0]!r}")
            continue
        bad = [n for n in names if normalize_hostname(n) is None]
        if bad:
            errors.append(f"line {number}: not a host name: {', '.join(repr(b) for b in bad)}")
            continue
        address = str(addresses[0][1])
        for name in names:
            host = normalize_hostname(name)
            assert host is not None
            if address not in pins.setdefault(host, []):
                pins[host].append(address)
    if errors:
        raise HostMapError("host map has malformed lines:\n" + "\n".join(errors))
    return {host: tuple(addresses) for host, addresses in pins.items()}


_MEDIA_TYPE: Final = re.compile(r"^[a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+$")

DEFAULT_USER_AGENT: Final = "FlinkCrawler/0.1 (+https://crawler.example.org/about; crawler@example.org)"


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    """The `[fetch]` section: how the fetcher talks to the web (docs/architecture.md §7 limits)."""

    # Sent on every request; names the crawler and a page explaining it (with contact details).
    user_agent: str = DEFAULT_USER_AGENT
    # TCP connect deadline, seconds.
    connect_timeout_s: float = 3.0
    # Deadline for the response head after the request is sent (and for any later silent gap), seconds.
    first_byte_timeout_s: float = 5.0
    # Deadline for the whole exchange, from resolution to the last body byte, seconds.
    total_timeout_s: float = 10.0
    # Below this average body rate (bytes/s), measured once the grace period has passed, give up.
    min_speed_bytes_per_s: int = 1_000
    min_speed_grace_s: float = 3.0
    # Body bytes read from the wire (before decompression); the rest is cut, WARC-Truncated "length".
    max_body_bytes: int = 10 * 1024 * 1024
    # Bytes after gzip/deflate/brotli decoding; stops a compression bomb at this size.
    max_decoded_bytes: int = 20 * 1024 * 1024
    # The same for HTML (text/html, application/xhtml+xml, or no Content-Type: the parser sniffs it):
    # what the parser is handed, so smaller; the smaller of the two caps applies.
    max_decoded_html_bytes: int = 5 * 1024 * 1024
    # Decoded bytes that all fetches in flight of one fetcher hold together: the bodies being read and
    # the window of each brotli decoder (what its stream declares, up to 16 MiB); at least
    # max_decoded_bytes, so a fetch alone always reaches its own cap.
    max_decoded_in_flight_bytes: int = 512 * 1024 * 1024
    # How long a fetch waits for room in that budget before it stops reading: the body read so far is
    # kept as too_large (WARC-Truncated "length"), like a body over its own cap. Seconds.
    decoded_budget_wait_s: float = 1.0
    # Total size of the status line and header fields; a larger head is refused.
    max_header_bytes: int = 64 * 1024
    max_header_count: int = 128
    # Media types archived and parsed (2xx pages only); others keep their headers and drop the body.
    allowed_content_types: tuple[str, ...] = (
        "text/html", "application/xhtml+xml", "text/plain",
        "application/xml", "text/xml", "application/rss+xml", "application/atom+xml",
    )
    # Media types also archived and parsed for a sitemap lease (FetchRequest.sitemap): how servers send a
    # `sitemap.xml.gz` file; parse inflates it by its magic bytes, capped (udfs.sitemaps; decision 1817).
    sitemap_content_types: tuple[str, ...] = ("application/gzip", "application/x-gzip", "application/octet-stream")
    # A page whose response has no Content-Type is fetched (the parser sniffs it).
    allow_missing_content_type: bool = True
    # robots.txt: body cap (RFC 9309 asks for at least 500 KiB) and redirect hops followed.
    robots_max_bytes: int = 512 * 1024
    robots_max_redirects: int = 5
    # SSRF guard: CIDR ranges re-admitted (allow) or refused (deny; deny wins).
    allow_cidrs: tuple[str, ...] = ()
    deny_cidrs: tuple[str, ...] = ()
    # Static pins, `hostname ip` or /etc/hosts lines, consulted before DNS; the file adds to them.
    host_map: tuple[str, ...] = ()
    host_map_file: str | None = None
    # Verify TLS certificates (off only for archiving hosts with broken certificates on purpose).
    verify_tls: bool = True
    # Real DNS for names not in the host map (off in tests: nothing may leave loopback).
    resolve_dns: bool = True
    # DNS servers asked, "ip", "ip:port" or "[ipv6]:port"; empty: the system's (/etc/resolv.conf).
    dns_nameservers: tuple[str, ...] = ()
    # One lookup's deadline, from asking to the answer (waiting for a lookup slot included), seconds;
    # a lookup that misses it is a failure, cached for dns_negative_ttl_s like NXDOMAIN. A fetch waits
    # for it at most until its own total_timeout_s; the lookup goes on to this deadline all the same.
    dns_timeout_s: float = 3.0
    # Queries sent for one name (to each server in turn) within that deadline.
    dns_tries: int = 2
    # Lookups running at once, in all and per registrable domain (a domain whose servers are slow
    # holds only its own slots).
    dns_max_concurrent: int = 64
    dns_max_concurrent_per_domain: int = 4
    # DNS answers are cached at most this long; failures are remembered for the negative TTL.
    dns_ttl_s: float = 300.0
    dns_negative_ttl_s: float = 60.0
    dns_cache_size: int = 10_000
    # A cached answer used in this last share of its TTL is looked up again in the background, so hosts
    # that keep getting requests never wait for DNS (decision 1818); 0 turns the refresh off.
    dns_prefetch_share: float = 0.1

    def __post_init__(self) -> None:
        if not self.user_agent.strip() or any(c in self.user_agent for c in "\r\n"):
            raise ValueError("user_agent must be one non-empty line")
        if "+http" not in self.user_agent:
            raise ValueError(f"user_agent {self.user_agent!r} must name a contact URL as '(+https://...)'")
        for name in ("connect_timeout_s", "first_byte_timeout_s", "total_timeout_s", "dns_ttl_s",
                     "dns_negative_ttl_s", "dns_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("connect_timeout_s", "first_byte_timeout_s"):
            if getattr(self, name) > self.total_timeout_s:
                raise ValueError(f"{name} ({getattr(self, name)}) exceeds total_timeout_s ({self.total_timeout_s})")
        if self.min_speed_bytes_per_s < 0 or self.min_speed_grace_s < 0:
            raise ValueError("min_speed_bytes_per_s and min_speed_grace_s must not be negative")
        for name in ("max_body_bytes", "max_decoded_bytes", "max_decoded_html_bytes", "max_header_bytes",
                     "max_header_count", "robots_max_bytes", "dns_cache_size", "dns_max_concurrent",
                     "dns_max_concurrent_per_domain"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_decoded_in_flight_bytes < self.max_decoded_bytes:
            raise ValueError(f"max_decoded_in_flight_bytes ({self.max_decoded_in_flight_bytes}) must be at least "
                             f"max_decoded_bytes ({self.max_decoded_bytes})")
        if not 0 <= self.decoded_budget_wait_s <= 60:
            raise ValueError(f"decoded_budget_wait_s must be in [0, 60], got {self.decoded_budget_wait_s}")
        if not 1 <= self.dns_tries <= 5:
            raise ValueError(f"dns_tries must be in 1..5, got {self.dns_tries}")
        if self.dns_max_concurrent_per_domain > self.dns_max_concurrent:
            raise ValueError(f"dns_max_concurrent_per_domain ({self.dns_max_concurrent_per_domain}) exceeds "
                             f"dns_max_concurrent ({self.dns_max_concurrent})")
        for server in self.dns_nameservers:
            parse_nameserver(server)   # raises naming the entry
        if not 0 <= self.dns_prefetch_share < 1:
            raise ValueError(f"dns_prefetch_share must be in [0, 1), got {self.dns_prefetch_share}")
        if self.robots_max_bytes < 500 * 1024:
            raise ValueError(f"robots_max_bytes must be at least 500 KiB (RFC 9309 §2.5), got {self.robots_max_bytes}")
        if not 0 <= self.robots_max_redirects <= 20:
            raise ValueError(f"robots_max_redirects must be in 0..20, got {self.robots_max_redirects}")
        for name in ("allowed_content_types", "sitemap_content_types"):
            bad_types = [t for t in getattr(self, name) if not _MEDIA_TYPE.match(t)]
            if bad_types:
                raise ValueError(f"{name}: not lower-case type/subtype: {bad_types}")
        # Parsed now so a bad CIDR or pin fails at start-up, not on the first fetch.
        _ = (self.allow_networks, self.deny_networks, self.static_pins)

    @functools.cached_property
    def allow_networks(self) -> tuple[IPNetwork, ...]:
        """`allow_cidrs` parsed."""
        return parse_cidrs(self.allow_cidrs, "allow_cidrs")

    @functools.cached_property
    def deny_networks(self) -> tuple[IPNetwork, ...]:
        """`deny_cidrs` parsed."""
        return parse_cidrs(self.deny_cidrs, "deny_cidrs")

    @functools.cached_property
    def static_pins(self) -> dict[str, tuple[str, ...]]:
        """`host_map` lines parsed (the file named by `host_map_file` is read by the operator)."""
        return parse_host_map("\n".join(self.host_map))

    def classify(self, ip: str | IPAddress) -> AddressVerdict:
        """`classify_address` with this policy's allow and deny ranges."""
        return classify_address(ip, self.allow_networks, self.deny_networks)

    def decoded_cap(self, content_type: str | None, robots: bool = False) -> int:
        """The decoded-size cap of one body: robots.txt's (robots_max_bytes), HTML's (max_decoded_html_bytes,
        also for a body without Content-Type) or any other kind's (max_decoded_bytes); never above the last."""
        if robots:
            return min(self.robots_max_bytes, self.max_decoded_bytes)
        if content_type is None or not content_type.strip() or media_type(content_type) in HTML_TYPES:
            return min(self.max_decoded_html_bytes, self.max_decoded_bytes)
        return self.max_decoded_bytes

    def content_type_allowed(self, content_type: str | None, sitemap: bool = False) -> bool:
        """Whether a Content-Type header value names an allowed media type (parameters ignored); for a
        sitemap lease (`sitemap`), `sitemap_content_types` are allowed too."""
        if content_type is None or not content_type.strip():
            return self.allow_missing_content_type
        kind = media_type(content_type)
        return kind in self.allowed_content_types or (sitemap and kind in self.sitemap_content_types)


HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})


def parse_nameserver(server: str) -> tuple[str, int]:
    """(address, port) of a DNS server written "ip", "ip:port" or "[ipv6]:port" (port 53 by default);
    raises ValueError naming the entry (`FetchPolicy.dns_nameservers`)."""
    text = server.strip()
    host, port = text, "53"
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"dns_nameservers: {server!r} is not ip, ip:port or [ipv6]:port")
        port = rest[1:] or "53"
    elif text.count(":") == 1:
        host, port = text.split(":")
    address = _as_ip(host)
    if address is None or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"dns_nameservers: {server!r} is not ip, ip:port or [ipv6]:port")
    return str(address), int(port)


def media_type(content_type: str) -> str:
    """The lower-case `type/subtype` of a Content-Type value, without parameters."""
    return content_type.split(";", 1)[0].strip().lower()
