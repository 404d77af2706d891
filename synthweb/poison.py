"""Poison: malformed records for each topic the crawl job reads, the input a broken or hostile producer
writes. Each is refused (rejected on crawl.status, quoting its marker) or, when it decodes, dropped and
counted by the frontier; none is a command the crawl obeys. The hostile crawl test and the crawl
benchmark's hostile web write them while the job runs.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from typing import NamedTuple

from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_OUTCOMES

HUGE = 900_000             # characters of a huge value (a topic record may hold 16 MiB)


class Poison(NamedTuple):
    """One malformed record for a topic the job reads: its key and value, a text within its first 1000
    characters (what a reject on crawl.status quotes of it), and whether decoding refuses it; one that
    decodes has something wrong further in, which the frontier drops and counts."""

    key: bytes | None
    value: bytes
    marker: str
    rejected: bool = True


def _json(value: object) -> bytes:
    """JSON as Python writes it: NaN and Infinity become tokens RFC 8259 has not, which Python reads."""
    return json.dumps(value).encode()


def poison_events(topic: str, target: str) -> list[Poison]:
    """Malformed records for crawl.frontier or crawl.outcomes (one contract, udfs/records.py); `target` is
    the host key of a real host, whose well-formed records carry malformed insides."""
    tag = topic.rsplit(".", 1)[1]
    m = [f"poison-{tag}-{k}" for k in range(17)]
    records = [
        Poison(b"", b"\xff\xfe\x00" + m[1].encode() + b" {not json", m[1]),                 # not JSON, not UTF-8
        Poison(None, _json([m[2], 1, 2]), m[2]),                                             # JSON, not an object
        Poison(b"", _json({"v": 1, "type": "discovered", "host": m[3], "urls": {"url": m[3]}}), m[3]),   # no list
        Poison(b"", _json({"v": math.nan, "type": "completion", "host": m[4]}), m[4]),
        Poison(None, _json({"v": 1, "type": "domain_hosts", "host": m[5], "hosts": math.inf}), m[5]),
        Poison(b"", _json({"v": "1", "type": "robots", "host": m[6]}), m[6]),               # a string for a number
        Poison(b"", _json({"v": 1, "type": "discovered", "host": [m[7]], "urls": []}), m[7]),   # a list for a host
        Poison(b"", _json({"v": 1, "type": "completion", "host": "", "lease_id": m[8]}), m[8]),  # empty key, host
        Poison(b"", _json({"v": 1, "type": m[9] + "x" * HUGE}), m[9]),                     # a huge value
        Poison(b"", _json({"v": 1, "type": "lease_extend", "host": m[10], "lease_id": m[10], "fp": math.inf}),
               m[10]),
    ]
    key, url = target.encode(), f"http://{target}/"
    if topic == TOPIC_FRONTIER:   # discovered batches whose URL entries are each malformed in their own way
        records += [
            Poison(key, _json({"poison": m[11], "v": 1, "type": "discovered", "host": target,
                               "urls": [{"url": url + m[11] + "-" + "a" * HUGE, "fp": 11}]}), m[11], False),
            Poison(key, _json({"poison": m[12], "v": 1, "type": "discovered", "host": target, "urls": [
                {"url": f"{url}{m[12]}-1.html", "fp": math.nan},
                {"url": f"{url}{m[12]}-2.html", "fp": 2, "depth": math.inf},
                {"url": f"{url}{m[12]}-3.html", "fp": 3, "priority": "high"},
                {"url": 4, "fp": 4},
                f"{url}{m[12]}-5.html",
                None,
                {"url": "", "fp": 7},
                {"url": f"{url}{m[12]}-8.html", "fp": -8},
                {"url": f"{url}{m[12]}-9.html", "fp": 2 ** 64 + 9},
                {"url": f"{url}{m[12]}-10.html", "fp": 10, "redirect_hops": -1},
                {"url": f"{url}{m[12]}-11.html", "fp": 11, "depth": True}]}), m[12], False),
            # A batch whose page was fetched in 1970: the discovery brake reads its lag until the next
            # batch. (One fetched 1e300 s ago fails the frontier: test_a_batch_found_in_the_distant_past_...)
            Poison(b"", _json({"poison": m[13], "v": 1, "type": "discovered", "host": f"{m[13]}.test", "urls": [],
                               "found_at": 0}), m[13], False),
        ]
    else:   # the ends of leases nobody holds, with fields of the wrong types
        records += [
            Poison(key, _json({"poison": m[14], "v": 1, "type": "completion", "host": target, "lease_id": 14,
                               "url": math.nan, "fp": "14", "fetch_status": math.inf, "http_status": "200",
                               "fetch_ms": -math.inf}), m[14], False),
            Poison(key, _json({"poison": m[15], "v": 1, "type": "robots", "host": target, "lease_id": m[15],
                               "fetch_status": "ok", "http_status": 200, "body_b64": 15}), m[15], False),
            Poison(key, _json({"poison": m[16], "v": 1, "type": "probe", "host": target, "lease_id": m[16],
                               "http_status": math.nan}), m[16], False),
        ]
    return records


MALFORMED_ENTRIES = 12     # URL entries of the discovered batches above, each dropped as malformed
STALE_LEASE_ENDS = 3       # lease ends above that match no lease


def poison_controls() -> list[Poison]:
    """Malformed crawl.control records (udfs/control.py), each refused, none a command the crawl obeys
    (several would pause it or block every host if they were); each id is its marker."""
    now = time.time()

    def command(kind: str, **fields: object) -> tuple[bytes, str]:
        marker = uuid.uuid4().hex
        return _json({"v": 1, "type": kind, "id": marker, "issued_at": now, **fields}), marker

    host = {"rate_limit_rps": None, "blocked": True}
    records = [
        (b"\xff\xfe" + b"poison-control-1 {not json", "poison-control-1"),
        (_json(["poison-control-2"]), "poison-control-2"),
        command("pause", issued_at=math.nan),
        command("pause", issued_at=1e300),
        command("host", host="poison-control-5.test", rate_limit_rps=math.inf, blocked=False),
        command("host", host="poison-control-6.test", rate_limit_rps=None, blocked="yes"),
        command("host", **{**host, "host": ""}),
        command("host", **{**host, "host": {"name": "poison-control-8.test"}}),
        command("resume", v="1"),
        command("takedown", scope="everything", value="/"),
        command("takedown", scope="pattern", value="poison-control-11" + "a" * 200_000),
    ]
    return [Poison(b"" if k % 2 else None, value, marker) for k, (value, marker) in enumerate(records)]


def poison_all(target: str) -> dict[str, list[Poison]]:
    """Poison for every topic the job reads, by topic; `target` as in `poison_events`."""
    return {TOPIC_FRONTIER: poison_events(TOPIC_FRONTIER, target),
            TOPIC_OUTCOMES: poison_events(TOPIC_OUTCOMES, target), TOPIC_CONTROL: poison_controls()}
