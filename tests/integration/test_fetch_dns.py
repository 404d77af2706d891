"""The fetcher's resolver against a DNS server of our own on loopback (synthweb/dns.py).

Real UDP DNS (c-ares through aiodns, pointed at the stub by `fetch.dns_nameservers`), real sockets on
127.x, no Flink. Proved from the DNS server's side (its query log) and the web server's side (which
listener served a request): slow lookups hold only their own domain's slots and never an unrelated
fetch, timeouts are cached failures that count against the host, a lookup a fetch gave up on still
ends and is cached, the connection goes to the address the fetcher checked and the result names the
peer that served it, pins still win and every DNS answer still passes the SSRF guard.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from operators.fetch import Fetcher
from operators.fetch_loop import FetchLoop
from operators.resolver import GuardedResolver, ResolveFailure
from tests.integration.test_fetch_operator import HOST_A, HOST_B, HOST_DENIED, Listener, LoopbackWeb, policy_for, reply
from synthweb.dns import QTYPE_A, DnsStub, Zone
from udfs.netguard import FetchPolicy
from udfs.politeness import Health, classify_health, next_backoff
from udfs.records import FetchRequest

DNS_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def dns() -> Iterator[DnsStub]:
    stub = DnsStub({
        "fast.test": Zone((HOST_A,)),
        "other.test": Zone((HOST_A,)),
        "slow.test": Zone((HOST_A,), delay_s=None),     # it and every name under it: never answered
        "late.test": Zone((HOST_A,), delay_s=0.8, ttl_s=0),
        "gone.test": Zone(()),                         # NXDOMAIN
        "rr.test": Zone((HOST_A, HOST_B), rotate=True, ttl_s=0),
        "flip.test": Zone((HOST_A, HOST_DENIED), rotate=True, ttl_s=0),
        "bad.test": Zone((HOST_DENIED,)),
        "meta-dns.test": Zone(("169.254.169.254",)),
        "metadata.google.internal": Zone((HOST_A,)),
        # TTL 0: c-ares keeps no copy of its own (it caches answers for their TTL), so these prove ours.
        "refresh.test": Zone((HOST_A,), ttl_s=0),
        "cache.test": Zone((HOST_A,), ttl_s=0),
    })
    stub.start()
    yield stub
    stub.stop()


@pytest.fixture(scope="module")
def web() -> Iterator[LoopbackWeb]:
    server = LoopbackWeb()
    port = server.add(Listener(HOST_A, {"/ok": reply()})).port
    for address in (HOST_B, HOST_DENIED):   # one port on every address: a URL reaches any of them
        server.add(Listener(address, {"/ok": reply()}, port=port))
    yield server
    server.close()


def policy(web: LoopbackWeb, dns: DnsStub, **overrides: object) -> FetchPolicy:
    settings: dict[str, object] = dict(resolve_dns=True, dns_nameservers=(dns.address,), dns_timeout_s=DNS_TIMEOUT_S,
                                       dns_max_concurrent_per_domain=4)
    settings.update(overrides)
    return policy_for(web, **settings)


def request(web: LoopbackWeb, host: str, seq: int = 1) -> FetchRequest:
    return FetchRequest(host=host, url=f"http://{host}:{web.listeners[HOST_A].port}/ok", fp=seq, kind="page",
                        lease_id=f"{host}/{seq}", depth=0, attempt=0)  # type: ignore[typeddict-item]


def a_queries(dns: DnsStub, name: str) -> int:
    return sum(1 for q in dns.queried(name) if q.qtype == QTYPE_A)


def served_by(web: LoopbackWeb) -> dict[str, int]:
    return {address: len(listener.requests) for address, listener in web.listeners.items()}


def test_a_name_resolves_through_the_configured_server(web: LoopbackWeb, dns: DnsStub) -> None:
    async def run() -> dict:
        fetcher = Fetcher(policy(web, dns))
        try:
            return dict(await fetcher.fetch(request(web, "fast.test")))
        finally:
            await fetcher.close()
    result = asyncio.run(run())
    assert (result["fetch_status"], result["ip"]) == ("ok", HOST_A)
    assert a_queries(dns, "fast.test") >= 1


def test_eight_slow_lookups_leave_an_unrelated_fetch_alone(web: LoopbackWeb, dns: DnsStub) -> None:
    """The issue's case: 8 lookups that never get an answer, then one fetch of an unrelated name. It
    goes at once; the slow names hold at most 4 lookup slots of their domain at a time (DNS server's
    log), and every slow request ends with a DNS failure within its deadlines."""
    fetcher = Fetcher(policy(web, dns, total_timeout_s=3.0))
    loop = FetchLoop(fetcher.fetch, capacity=16, total_timeout_s=3.0, locate=fetcher.address)
    loop.on_stop(fetcher.close)
    loop.start()
    started = time.monotonic()
    try:
        for i in range(8):
            loop.submit(request(web, f"s{i}.slow.test", i))
        time.sleep(0.1)
        asked = time.monotonic()
        loop.submit(request(web, "other.test", 99))
        results: dict[str, tuple[float, dict]] = {}
        while len(results) < 9 and time.monotonic() - started < 15:
            loop.wait(0.05)
            for result in loop.drain():
                results[result["request"]["host"]] = (time.monotonic(), dict(result))
    finally:
        loop.stop()
    at, unrelated = results["other.test"]
    assert unrelated["fetch_status"] == "ok" and at - asked < 0.5, (at - asked, unrelated["reason"])
    slow = [r for host, (_, r) in results.items() if host != "other.test"]
    assert len(slow) == 8 and all(r["fetch_status"] == "dns_error" for r in slow), [r["reason"] for r in slow]
    assert max(t for t, _ in results.values()) - started < 3 * DNS_TIMEOUT_S + 1.0
    # Server side: never more than 4 slow names asked about within any 0.3 s (c-ares retries a name
    # after half the deadline; the next names start only when a slot comes free, at the deadline).
    slow_queries = sorted((q.at, q.name) for q in dns.queries if q.name.endswith(".slow.test") and q.at >= started)
    assert slow_queries
    for t, _ in slow_queries:
        assert len({name for at_, name in slow_queries if t <= at_ < t + 0.3}) <= 4


def test_a_lookup_that_times_out_is_a_cached_failure(web: LoopbackWeb, dns: DnsStub) -> None:
    resolver = GuardedResolver(policy(web, dns), {})

    async def run() -> tuple[str, float, str, float]:
        try:
            outcomes = []
            for _ in range(2):
                began = time.monotonic()
                with pytest.raises(ResolveFailure) as failed:
                    await resolver.addresses("never.slow.test")
                outcomes += [failed.value.reason, time.monotonic() - began]
            return tuple(outcomes)  # type: ignore[return-value]
        finally:
            await resolver.close()
    first, first_s, second, second_s = asyncio.run(run())
    assert "no DNS answer within 1 s" in first and second == first
    assert DNS_TIMEOUT_S - 0.1 < first_s < DNS_TIMEOUT_S + 0.5 and second_s < 0.05
    assert resolver.counts["dns_timeouts"] == 1 and resolver.counts["dns_lookups"] == 1


def test_a_lookup_a_fetch_gave_up_on_still_ends_and_serves_the_next_fetch(web: LoopbackWeb, dns: DnsStub) -> None:
    """late.test answers after 0.8 s; the first fetch's deadline is 0.5 s, the lookup's 2 s (1 s a
    try). The lookup goes on and is cached, so the next fetch needs no query at all."""
    async def run() -> tuple[dict, int, dict, int]:
        fetcher = Fetcher(policy(web, dns, connect_timeout_s=0.5, first_byte_timeout_s=0.5, total_timeout_s=0.5,
                                 dns_timeout_s=2.0))
        try:
            gave_up = dict(await fetcher.fetch(request(web, "late.test")))
            asked = a_queries(dns, "late.test")
            await asyncio.sleep(0.6)
            later = dict(await fetcher.fetch(request(web, "late.test")))
            return gave_up, asked, later, a_queries(dns, "late.test")
        finally:
            await fetcher.close()
    gave_up, asked, later, asked_after = asyncio.run(run())
    assert gave_up["fetch_status"] == "timeout" and "total time" in gave_up["reason"]
    assert (later["fetch_status"], later["ip"]) == ("ok", HOST_A)
    assert asked_after == asked, "the second fetch was answered from the cache the first one's lookup filled"


def test_a_dns_timeout_is_a_failure_of_the_host(web: LoopbackWeb, dns: DnsStub) -> None:
    async def run() -> dict:
        fetcher = Fetcher(policy(web, dns))
        try:
            return dict(await fetcher.fetch(request(web, "down.slow.test")))
        finally:
            await fetcher.close()
    result = asyncio.run(run())
    assert result["fetch_status"] == "dns_error" and "no DNS answer" in result["reason"]
    health = classify_health(result["fetch_status"], result["http_status"])
    assert health is Health.UNREACHABLE and next_backoff(0.0, health) > 0


def test_the_result_names_the_address_that_served_it(web: LoopbackWeb, dns: DnsStub) -> None:
    """rr.test answers HOST_A and HOST_B in turn, a new answer each query, TTL 0. Whatever DNS says
    between the check and the connect, the result's `ip` is the listener that logged the request."""
    async def run() -> list[tuple[str, str]]:
        fetcher = Fetcher(policy(web, dns, dns_ttl_s=1e-6))
        pairs = []
        try:
            for seq in range(4):
                before = served_by(web)
                result = await fetcher.fetch(request(web, "rr.test", seq))
                after = served_by(web)
                (server,) = [a for a in after if after[a] > before[a]]
                pairs.append((str(result["ip"]), server))
        finally:
            await fetcher.close()
        return pairs
    pairs = asyncio.run(run())
    assert all(ip == server for ip, server in pairs), pairs
    assert {server for _, server in pairs} == {HOST_A, HOST_B}


def test_the_connection_goes_to_the_checked_address_whatever_dns_says_next(web: LoopbackWeb, dns: DnsStub) -> None:
    """flip.test answers HOST_A, then the denied HOST_DENIED (rebinding), TTL 0: the fetch checks
    HOST_A and connects to it; DNS is asked once, and the denied address never sees a connection."""
    denied = web.listeners[HOST_DENIED]
    before, asked = denied.connections, a_queries(dns, "flip.test")

    async def run() -> dict:
        fetcher = Fetcher(policy(web, dns, dns_ttl_s=1e-6))
        try:
            return dict(await fetcher.fetch(request(web, "flip.test")))
        finally:
            await fetcher.close()
    result = asyncio.run(run())
    assert (result["fetch_status"], result["ip"]) == ("ok", HOST_A)
    assert denied.connections == before and a_queries(dns, "flip.test") == asked + 1


def test_pins_win_over_dns(web: LoopbackWeb, dns: DnsStub) -> None:
    asked = a_queries(dns, "fast.test")

    async def run() -> dict:
        fetcher = Fetcher(policy(web, dns, host_map=(f"fast.test {HOST_B}",)))
        try:
            return dict(await fetcher.fetch(request(web, "fast.test")))
        finally:
            await fetcher.close()
    result = asyncio.run(run())
    assert (result["fetch_status"], result["ip"]) == ("ok", HOST_B) and a_queries(dns, "fast.test") == asked


@pytest.mark.parametrize("host, status, why", [
    ("bad.test", "blocked", "deny range"),
    ("meta-dns.test", "blocked", "cloud metadata address"),
    ("metadata.google.internal", "blocked", "cloud metadata host name"),
    ("gone.test", "dns_error", "not found"),
])
def test_every_dns_answer_passes_the_guard_before_any_connection(web: LoopbackWeb, dns: DnsStub, host: str,
                                                                 status: str, why: str) -> None:
    before = {a: listener.connections for a, listener in web.listeners.items()}

    async def run() -> dict:
        fetcher = Fetcher(policy(web, dns))
        try:
            return dict(await fetcher.fetch(request(web, host)))
        finally:
            await fetcher.close()
    result = asyncio.run(run())
    assert result["fetch_status"] == status and why in result["reason"].lower(), result["reason"]
    assert {a: listener.connections for a, listener in web.listeners.items()} == before
    if host == "metadata.google.internal":
        assert dns.queried(host) == [], "a metadata name is refused before DNS is asked"


def test_dns_answers_and_failures_are_cached_for_their_ttl(web: LoopbackWeb, dns: DnsStub) -> None:
    now = [0.0]
    resolver = GuardedResolver(policy(web, dns, dns_ttl_s=10, dns_negative_ttl_s=5), {}, monotonic=lambda: now[0])
    asked = {"cache.test": a_queries(dns, "cache.test"), "gone.test": a_queries(dns, "gone.test")}

    async def run() -> list[str]:
        outcomes = []
        try:
            for step, host in [(0, "cache.test"), (5, "cache.test"), (11, "cache.test"), (0, "gone.test"),
                               (3, "gone.test"), (9, "gone.test")]:
                now[0] = float(step) + (20 if host == "gone.test" else 0)
                try:
                    outcomes.append(",".join(await resolver.addresses(host)))
                except ResolveFailure as failure:
                    outcomes.append(failure.status.value)
        finally:
            await resolver.close()
        return outcomes
    outcomes = asyncio.run(run())
    assert outcomes == [HOST_A, HOST_A, HOST_A, "dns_error", "dns_error", "dns_error"]
    assert [a_queries(dns, h) - n for h, n in asked.items()] == [2, 2]


def test_an_answer_used_near_the_end_of_its_ttl_is_refreshed_in_the_background(web: LoopbackWeb,
                                                                                  dns: DnsStub) -> None:
    now = [0.0]
    resolver = GuardedResolver(policy(web, dns, dns_ttl_s=10, dns_prefetch_share=0.1), {}, monotonic=lambda: now[0])
    good, bad = Zone((HOST_A,), ttl_s=0), Zone(())
    asked: list[int] = []

    async def run() -> list[str]:
        outcomes = []
        try:
            # 0: looked up; 5: cached; 9.5: cached, refreshed behind it (good to 19.5); 15: cached;
            # 19: cached, its refresh fails (NXDOMAIN), so the good answer stays; 19.4: still it (refresh
            # tried again); 20: expired, looked up, fails.
            for step, fail in [(0, False), (5, False), (9.5, False), (15, False), (19, True), (19.4, True),
                               (20, True)]:
                now[0] = step
                dns.zones["refresh.test"] = bad if fail else good
                try:
                    outcomes.append(",".join(await resolver.addresses("refresh.test")))
                except ResolveFailure as failure:
                    outcomes.append(failure.status.value)
                await asyncio.sleep(0.05)   # the background refresh runs
                asked.append(a_queries(dns, "refresh.test"))
        finally:
            await resolver.close()
            dns.zones["refresh.test"] = good
        return outcomes
    outcomes = asyncio.run(run())
    assert outcomes == [HOST_A] * 6 + ["dns_error"]
    lookups = [b - a for a, b in zip([asked[0] - 1] + asked, asked)]
    assert lookups == [1, 0, 1, 0, 1, 1, 1]
    assert resolver.counts["dns_prefetches"] == 3 and resolver.counts["dns_lookups"] == 5
