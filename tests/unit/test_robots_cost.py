"""udfs.robots: matching one URL costs a bounded amount of work, whatever the file (decision 3720).

Checked by counting, never by timing: the path is handed to the matcher as a `str` subclass that
records what is asked of it (wildcard rules examined, octets a substring search may compare,
octets hashed for dictionary probes), and the counts are held against the budget. The files are
the hostile shapes a site can serve within the 512 KiB parse limit.
"""
from __future__ import annotations

import gzip
import json
import string
import tarfile
from typing import Any, SupportsIndex

import pytest

from tests.paths import TESTDATA, WEBDATA
from udfs import robots
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsCheck, RobotsPolicy, parse_robots, url_match_path

AGENT = "FlinkCrawler/0.1"
BUDGET = DEFAULT_ROBOTS_POLICY.match_budget
LIMIT = DEFAULT_ROBOTS_POLICY.max_bytes
# Prefix rules a path may read by `startswith` unpaid: two buckets, up to 16 each.
LISTED_PREFIX_RULES = 2 * robots._LISTED_PREFIXES


class CountingPath(str):
    """A path that counts the work the matcher asks of it."""

    examined: int
    compared: int
    hashed: int

    def __new__(cls, text: str) -> CountingPath:
        path = super().__new__(cls, text)
        path.examined = path.compared = path.hashed = 0
        return path

    def startswith(self, prefix: Any, *args: Any) -> bool:  # once per wildcard rule examined
        self.examined += 1
        return super().startswith(prefix, *args)

    def find(self, sub: Any, start: Any = None, end: Any = None) -> int:
        """Counts the octets `str.find` may compare: one per place, the whole piece where its last octet is."""
        start, end = start or 0, len(self) if end is None else end
        places = end - start - len(sub) + 1
        if places > 0:
            self.compared += places + str.count(self, sub[-1], start + len(sub) - 1, end) * len(sub)
        return super().find(sub, start, end)

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        part = super().__getitem__(key)
        if isinstance(key, slice):  # a probe of the rules by text
            self.hashed += len(part)
        return part


def _file(lines: Any) -> bytes:
    """`User-agent: *` and as many of `lines` as fit in the parse limit."""
    out, size = [b"User-agent: *\n"], 14
    for line in lines:
        if size + len(line) + 1 > LIMIT:
            break
        out.append(line + b"\n")
        size += len(line) + 1
    return b"".join(out)


def _worst_needles(length: int) -> list[bytes]:
    """Pieces that make `str.find` compare almost all of themselves at every place of `/aaaa...`."""
    marks = [c.encode() for c in string.ascii_letters + string.digits if c != "a"]
    return [b"a" * k + mark + b"a" * (length - k - 1) for k in range(length - 1) for mark in marks]


HOSTILE = {
    # the reviewer's files: 26,667 `/a*N$` (8.5 ms a URL before) and `/a*N*z$` (50 ms for 2 KB)
    "a*N$": (_file(b"Disallow: /a*%d$" % i for i in range(1, 10**6)), "/a" + "b" * 2040 + "1"),
    "a*N*z$": (_file(b"Disallow: /a*%d*z$" % i for i in range(1, 10**6)), "/a" + "b" * 2040 + "z"),
    "a*N*z$ short URL": (_file(b"Disallow: /a*%d*z$" % i for i in range(1, 10**6)), "/a/page.html?z"),
    "repetitive find m=8": (_file(b"Disallow: /a*" + n for n in _worst_needles(8)), "/a" + "a" * 2040),
    "repetitive find m=99": (_file(b"Disallow: /a*" + n for n in _worst_needles(99)), "/a" + "a" * 2040),
    "200 pieces a rule": (_file(b"Disallow: /*" + b"a*" * 200 + b"b%d" % i for i in range(1, 10**6)), "/" + "a" * 2040),
    "equal-priority allows": (_file(b"Allow: /a*%05d$" % i for i in range(1, 10**6)), "/a" + "b" * 2040),
    "prefix of every length": (_file(b"Disallow: /" + b"a" * n + b"x" for n in range(1, 2000)), "/" + "a" * 2040),
    "heads that miss": (_file(b"Disallow: /a%d*x" % i for i in range(1, 10**6)), "/a" + "b" * 2040),
    "prefix and exact rules": (_file(b"Disallow: /a%d%s" % (i, b"$" * (i % 2)) for i in range(1, 10**6)), "/a" + "b" * 2040),
}


def _counted(body: bytes, path: str, budget: int = BUDGET) -> tuple[CountingPath, RobotsCheck]:
    matcher = parse_robots(body)._resolve(AGENT)[0]
    counting = CountingPath(path)
    verdict = robots._decide(matcher, counting, budget)
    return counting, RobotsCheck(allowed=verdict > 0, over_budget=verdict < 0)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_file_costs_at_most_the_budget_per_url(name: str) -> None:
    body, path = HOSTILE[name]
    assert len(body) <= LIMIT
    counted, answer = _counted(body, path)
    assert counted.examined <= BUDGET // robots._RULE_WORK + LISTED_PREFIX_RULES
    assert counted.compared <= BUDGET
    assert counted.hashed <= BUDGET
    if answer.over_budget:
        assert not answer.allowed  # an answer cut short refuses


def test_work_per_url_is_set_by_the_budget_not_by_the_number_of_rules() -> None:
    """A file of 26,667 wildcard rules examines no more rules than one of 2,600; a larger budget more."""
    small = _file(b"Disallow: /a*%d$" % i for i in range(1, 2601))
    large = HOSTILE["a*N$"][0]
    path = HOSTILE["a*N$"][1]
    assert _counted(small, path)[0].examined == _counted(large, path)[0].examined == BUDGET // robots._RULE_WORK
    assert _counted(large, path, 4 * BUDGET)[0].examined == 4 * BUDGET // robots._RULE_WORK


def test_answer_over_the_budget_refuses_and_says_so() -> None:
    body = b"User-agent: *\nDisallow: /\nAllow: /*.html$\nAllow: /*/public/*\n"
    url = "https://a.example/docs/public/page.html"
    assert parse_robots(body).check(url, AGENT) == RobotsCheck(allowed=True, over_budget=False)
    tight = parse_robots(body, RobotsPolicy(match_budget=100))
    assert tight.check(url, AGENT) == RobotsCheck(allowed=False, over_budget=True)
    assert not tight.allowed(url, AGENT)
    assert tight.check("https://a.example/robots.txt", AGENT) == RobotsCheck(allowed=True, over_budget=False)


def test_an_answer_decided_before_the_budget_runs_out_is_exact() -> None:
    """Wildcard rules that cannot change the answer are not examined, so they cost nothing."""
    body = HOSTILE["a*N$"][0].replace(b"User-agent: *\n", b"User-agent: *\nAllow: /a/open/everything/here\n")
    counted, answer = _counted(body, "/a/open/everything/here/page")
    assert answer == RobotsCheck(allowed=True, over_budget=False)
    assert counted.examined == 1  # the allow itself, none of the 26,667 wildcard rules


@pytest.mark.parametrize(("pattern", "same_as"), [("/a*", "/a"), ("/a*$", "/a"), ("/a**", "/a"), ("/a*b*$", "/a*b")])
def test_a_pattern_ending_in_a_star_is_a_prefix_rule(pattern: str, same_as: str) -> None:
    rule = robots._compile_rule(False, pattern, len(pattern))
    expected = robots._compile_rule(False, same_as, len(pattern))
    assert rule == expected


def test_no_real_world_probe_comes_near_the_budget() -> None:
    with gzip.open(TESTDATA / "robots_realworld" / "robots_realworld_google_oracle.json.gz") as fh:
        data = json.load(fh)
    files = {name: parse_robots(body.encode("utf-8", "surrogatepass")) for name, body in data["files"].items()}
    over = [c for c in data["cases"] if files[c["file"]].check(c["url"], c["useragent"]).over_budget]
    assert over == []


def test_every_real_world_file_answers_urls_of_ordinary_length_within_the_budget() -> None:
    """4,231 real files; the costliest (392 wildcard rules) needs about half the budget at 250 octets."""
    with tarfile.open(WEBDATA / "robots_txt_protego" / "robots_txt_files.tar.gz") as tar:
        bodies = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]  # type: ignore[union-attr]
    url = "https://a.example" + ("/shop/category/item-12345.html?page=2&sort=price&q=blue+shoes" * 5)[:250]
    assert len(url_match_path(url)) == 250
    over = [i for i, body in enumerate(bodies) if parse_robots(body).check(url, AGENT).over_budget]
    assert len(bodies) > 4000 and over == []
