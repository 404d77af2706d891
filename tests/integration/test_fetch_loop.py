"""The fetcher's own per-address gate (operators/fetch_loop.py, decision 1612), proved from the server's
side: two host names on one address never have requests open together (also when the frontier does
not know their address yet), an address resolved here that another fetch subtask owns is never sent to,
another address is not held up, an abandoned fetch keeps its address busy for the hold, a full queue
refuses, and every request ends in exactly one result. Real sockets on 127.x, real aiohttp fetches, no Flink.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from operators.fetch import Fetcher
from operators.fetch_loop import FetchLoop, Owns
from tests.integration.test_fetch_operator import HOST_A, HOST_B, Listener, LoopbackWeb, Writer, policy_for, reply
from udfs.ip_gate import IpGatePolicy
from udfs.records import FetchRequest

SLOW_S = 0.4


Log = list[tuple[float, float]]


def timed(log: Log, delay: float) -> object:
    """A handler that answers after `delay` and logs (start, end) of the exchange as the server saw it."""
    async def handle(request: dict[str, str], writer: Writer) -> None:
        started = time.monotonic()
        await asyncio.sleep(delay)
        await reply()(request, writer)
        await writer.drain()
        log.append((started, time.monotonic()))
    return handle


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[LoopbackWeb, dict[str, Log]]]:
    web, logs = LoopbackWeb(), {HOST_A: [], HOST_B: []}
    for address, log in logs.items():
        web.add(Listener(address, {**{f"/slow{i}": timed(log, SLOW_S) for i in range(8)},
                                   "/stall": timed(log, 5.0)}))
    yield web, logs
    web.close()


def request(web: LoopbackWeb, host: str, address: str, path: str, seq: int, known: bool = True) -> FetchRequest:
    """A page request for `host` served at `address`; with `known` false the frontier has not learned
    the address yet (no `ip`: the loop resolves the name itself)."""
    port = web.listeners[address].port
    return FetchRequest(host=host, url=f"http://{host}:{port}{path}", fp=seq, kind="page",  # type: ignore[typeddict-item]
                        lease_id=f"{host}/{seq}", depth=0, attempt=0, ip=address if known else None)


def run(web: LoopbackWeb, requests: list[FetchRequest], gate: IpGatePolicy = IpGatePolicy(),
        expect: int | None = None, timeout_s: float = 20.0, owns: Owns | None = None,
        **policy: object) -> tuple[list[dict], FetchLoop]:
    """Submit `requests` to a fresh loop (of a subtask that `owns` some gate keys; None: all) and collect
    results until `expect` (default: all) arrived."""
    host_map = (f"a1.test {HOST_A}", f"a2.test {HOST_A}", f"a3.test {HOST_A}", f"b1.test {HOST_B}")
    fetcher = Fetcher(policy_for(web, host_map=host_map, **policy))
    loop = FetchLoop(fetcher.fetch, gate, capacity=16, locate=fetcher.address, owns=owns)
    loop.on_stop(fetcher.close)
    loop.start()
    try:
        for req in requests:
            loop.submit(req)
        results: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while len(results) < (len(requests) if expect is None else expect) and time.monotonic() < deadline:
            loop.wait(0.05)
            results += [dict(r) for r in loop.drain()]
        return results, loop
    finally:
        loop.stop()


def logged(logs: dict[str, Log], wanted: dict[str, int], timeout_s: float = 5.0) -> None:
    """Wait until each address's log holds `wanted` exchanges: the server logs an exchange after its
    last byte went out, and the client may have it a moment before."""
    deadline = time.monotonic() + timeout_s
    while any(len(logs[a]) < n for a, n in wanted.items()) and time.monotonic() < deadline:
        time.sleep(0.02)


def overlapping(spans: Log) -> int:
    """How many exchanges started before the previous one (by start) had ended."""
    spans = sorted(spans)
    return sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)


def test_hosts_on_one_address_take_turns_while_another_address_runs_beside_them(served) -> None:
    web, logs = served
    for log in logs.values():
        log.clear()
    shared = [request(web, host, HOST_A, f"/slow{i}", i) for i, host in enumerate(["a1.test", "a2.test", "a3.test"])]
    other = request(web, "b1.test", HOST_B, "/slow0", 9)
    results, loop = run(web, [*shared, other])
    assert sorted(r["request"]["lease_id"] for r in results) == sorted(r["lease_id"] for r in [*shared, other])
    assert all((r["fetch_status"], r["http_status"]) == ("ok", 200) for r in results)
    logged(logs, {HOST_A: 3, HOST_B: 1})
    assert len(logs[HOST_A]) == 3 and overlapping(logs[HOST_A]) == 0
    (b_start, b_end), = logs[HOST_B]
    first_a_end = min(end for _, end in logs[HOST_A])
    assert b_start < first_a_end        # not queued behind the busy address
    assert (loop.counts["queued"], loop.counts["released"], loop.counts["done"]) == (4, 4, 4)
    assert loop.idle() and loop.running == 0 and loop.waiting == 0


def test_host_names_whose_address_the_frontier_does_not_know_yet_still_take_turns_on_it(served) -> None:
    web, logs = served
    for log in logs.values():
        log.clear()
    shared = [request(web, host, HOST_A, f"/slow{i}", i, known=False)
              for i, host in enumerate(["a1.test", "a2.test", "a3.test"])]
    unknown = dict(request(web, "b1.test", HOST_B, "/slow0", 9, known=False), url="http://nowhere.test/")
    results, loop = run(web, [*shared, unknown])
    by_lease = {r["request"]["lease_id"]: r for r in results}
    assert [by_lease[r["lease_id"]]["fetch_status"] for r in shared] == ["ok"] * 3
    assert by_lease["b1.test/9"]["fetch_status"] == "dns_error"   # no address: gated by host, fails as before
    logged(logs, {HOST_A: 3})
    assert len(logs[HOST_A]) == 3 and overlapping(logs[HOST_A]) == 0
    assert {by_lease[r["lease_id"]]["request"]["ip"] for r in shared} == {HOST_A}
    assert loop.idle() and loop.locating == 0


def test_an_address_another_subtask_owns_is_handed_back_unsent(served) -> None:
    """A subtask that owns only HOST_B's gate: the names it resolves to HOST_A end `misrouted`, naming
    HOST_A, before any connection (HOST_A's server saw nothing); its own and requests that came with
    their address (Flink routed those by it) are fetched."""
    web, logs = served
    for log in logs.values():
        log.clear()
    elsewhere = [request(web, host, HOST_A, f"/slow{i}", i, known=False)
                 for i, host in enumerate(["a1.test", "a2.test"])]
    mine = request(web, "b1.test", HOST_B, "/slow0", 8, known=False)
    routed = request(web, "a3.test", HOST_A, "/slow3", 9)
    results, loop = run(web, [*elsewhere, mine, routed], owns=lambda key: key == HOST_B)
    by_lease = {r["request"]["lease_id"]: r for r in results}
    for req in elsewhere:
        handed_back = by_lease[req["lease_id"]]
        assert (handed_back["fetch_status"], handed_back["ip"]) == ("misrouted", HOST_A)
        assert handed_back["http_status"] is None
        assert "another fetch subtask" in handed_back["reason"]
    assert by_lease["b1.test/8"]["fetch_status"] == "ok" and by_lease["a3.test/9"]["fetch_status"] == "ok"
    logged(logs, {HOST_A: 1, HOST_B: 1})
    time.sleep(SLOW_S)   # room for a stray exchange to show up in the log
    assert (len(logs[HOST_A]), len(logs[HOST_B])) == (1, 1)
    assert loop.counts["misrouted"] == 2 and loop.counts["released"] == 2
    assert loop.idle() and loop.locating == 0


def test_an_abandoned_fetch_keeps_its_address_busy_for_the_hold(served) -> None:
    web, logs = served
    logs[HOST_A].clear()
    stalled = request(web, "a1.test", HOST_A, "/stall", 1)
    after = request(web, "a2.test", HOST_A, "/slow1", 2)
    gate = IpGatePolicy(abandoned_hold_s=1.0)
    started = time.monotonic()
    cut_s = 0.6   # policy_for's first-byte timeout: the stall never sends a head
    results, _ = run(web, [stalled, after], gate)
    by_lease = {r["request"]["lease_id"]: r for r in results}
    assert by_lease["a1.test/1"]["fetch_status"] == "timeout"
    assert by_lease["a2.test/2"]["fetch_status"] == "ok"
    # The server saw the second request only after the first was cut and the hold (1 s) had passed.
    logged(logs, {HOST_A: 1})
    second_start = min(start for start, _ in logs[HOST_A])
    assert second_start - started >= cut_s + 1.0 - 0.05


def test_a_full_queue_refuses_and_every_other_request_ends_in_one_result(served) -> None:
    web, logs = served
    gate = IpGatePolicy(max_queue=1)
    requests = [request(web, host, HOST_A, f"/slow{i}", i) for i, host in enumerate(["a1.test", "a2.test", "a3.test"])]
    results, loop = run(web, requests, gate, expect=3, timeout_s=3 * SLOW_S + 2)
    # a1 runs, a2 waits in the queue of one, a3 is refused: its frontier lease expires and it is re-leased.
    assert sorted(r["request"]["lease_id"] for r in results) == ["a1.test/0", "a2.test/1"]
    assert loop.counts["refused"] == 1 and loop.counts["released"] == 2


def test_a_request_that_can_no_longer_end_within_its_lease_is_never_sent(served) -> None:
    web, logs = served
    logs[HOST_A].clear()
    late = dict(request(web, "a1.test", HOST_A, "/slow1", 1), lease_deadline=time.time() + 5.0)
    fresh = dict(request(web, "a2.test", HOST_A, "/slow2", 2), lease_deadline=time.time() + 60.0)
    before = len(web.listeners[HOST_A].requests)
    results, loop = run(web, [late, fresh], expect=1)   # policy_for: total timeout 1.5 s, +5 s margin
    assert [r["request"]["lease_id"] for r in results] == ["a2.test/2"]
    assert [r["path"] for r in web.listeners[HOST_A].requests[before:]] == ["/slow2"]   # the server never saw /slow1
    assert loop.counts["too_late"] == 1 and loop.counts["done"] == 2
