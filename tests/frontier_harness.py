"""A frontier for one host with dict-backed state, a simulated clock and timer (operators.host_frontier.HostFrontier),
shared by the frontier glue tests; and the stand-ins they use for Flink state and robots rules."""
from __future__ import annotations

import collections
from collections.abc import Callable

from operators.frontier_config import HostFrontierConfig
from operators.frontier_metrics import METRICS
from operators.host_frontier import HostFrontier
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import HostState
from udfs.budgets import BudgetPolicy
from udfs.control_state import ControlTable
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy
from udfs.politeness import PolitenessPolicy
from udfs.records import b64, render_event
from udfs.render_policy import RenderPolicy
from udfs.robots import RobotsPolicy, parse_robots
from udfs.sitemaps import SitemapPolicy
from udfs.soft404 import Soft404Policy
from udfs.urls import url_fp

HOST = "shop.example"
T0 = 1_700_000_000.0


class Value:
    def __init__(self) -> None:
        self.v = None

    def value(self):
        return self.v

    def update(self, v) -> None:
        self.v = v


class Map(dict):
    def put(self, k, v) -> None:
        self[k] = v

    def remove(self, k) -> None:
        del self[k]


class PrefixRules:
    """robots.txt as whitespace-separated words: absolute URLs are its Sitemap: lines, the rest disallowed prefixes."""

    def __init__(self, body: bytes) -> None:
        words = body.decode().split()
        self.disallowed = [w for w in words if not w.startswith("http")]
        self.listed = [w for w in words if w.startswith("http")]
        self.parses = 0

    @property
    def sitemaps(self) -> list[str]:
        return list(self.listed)

    def allowed(self, url: str, user_agent: str) -> bool:
        path = "/" + url.split("://", 1)[1].partition("/")[2]
        return not any(path.startswith(p) for p in self.disallowed)

    def crawl_delay(self, user_agent: str) -> float | None:
        return None


def discovered(*paths: str, priority: int = 5) -> dict:
    """A discovered batch of the host's `paths`."""
    urls = [{"url": f"http://{HOST}{p}", "fp": url_fp(f"http://{HOST}{p}"), "depth": 1, "priority": priority,
             "source": "link"} for p in paths]
    return {"v": 1, "type": "discovered", "host": HOST, "urls": urls}


class Harness:
    """One host's frontier with its state, timer and clock simulated."""

    def __init__(self, policy: FrontierPolicy = FrontierPolicy(max_queue=8, lease_timeout_s=30),
                 politeness: PolitenessPolicy = PolitenessPolicy(),
                 robots_policy: RobotsPolicy = RobotsPolicy(), controls: ControlTable | None = None,
                 soft404: Soft404Policy | None = None, budgets: BudgetPolicy | None = None,
                 census: bool = False, sitemaps: SitemapPolicy | None = None,
                 optout: OptOutPolicy | None = None, tdmrep_body: Value | None = None,
                 parse: Callable[[bytes], object] | None = None, render: RenderPolicy | None = None) -> None:
        """`optout` and `tdmrep_body` together turn tdmrep.json leases on (decision 1930); `parse` replaces
        the counting prefix-rule parser (e.g. the real `parse_robots`); `render` the rendering tier's
        section (render leases when enabled, decision 3905)."""
        self.host_row, self.body, self.slots, self.urls = Value(), Value(), Map(), Map()
        self.counts: collections.Counter[str] = collections.Counter()
        self.parses = 0
        self.config = HostFrontierConfig(policy=policy, politeness=politeness, robots_policy=robots_policy,
                                         optout=optout or DEFAULT_OPTOUT_POLICY, soft404=soft404, budgets=budgets,
                                         census=census, sitemaps=sitemaps, render=render)
        self._open = lambda: HostFrontier(self.host_row, self.body, self.slots, self.urls, self._count,
                                          parse or self._parse, self.config, tdmrep_body=tdmrep_body,
                                          controls=controls)
        self.frontier = self._open()
        self.policy, self.politeness, self.robots_policy = policy, politeness, robots_policy
        self.census: list[tuple[float, dict]] = []   # questions to the domain census (decision 1811)
        self.events: list[tuple[str, str, bytes]] = []  # records for other hosts' keys (decision 1812)
        self.now = T0
        self.timers: set[int] = set()
        self.sent: list[tuple[float, dict]] = []

    def restart(self) -> None:
        """A new frontier over the same state, as after a restore: it reads the rows as they are stored."""
        self.frontier = self._open()

    def _count(self, name: str) -> None:
        assert name in METRICS, name
        self.counts[name] += 1

    def _parse(self, body: bytes) -> PrefixRules:
        self.parses += 1
        return PrefixRules(body)

    @property
    def state(self) -> HostState:
        return HostState.from_row(self.host_row.value())

    def _apply(self, effects) -> list[dict]:
        if effects.timer_delete_ms:
            self.timers.discard(effects.timer_delete_ms)
        if effects.timer_register_ms:
            self.timers.add(effects.timer_register_ms)
        self.sent += [(self.now, r) for r in effects.requests]
        self.census += [(self.now, q) for q in effects.census]
        self.events += list(effects.events)
        state = self.state
        assert len(self.timers) <= 1 and (state.timer_ms == 0) == (not self.timers), "one timer per host"
        assert state.queued <= self.policy.max_queue and len(self.slots) == state.queued, "bounded queue"
        return effects.requests

    def event(self, event: dict) -> list[dict]:
        return self._apply(self.frontier.on_event(HOST, event, self.now))

    def gathered(self, *events: dict) -> list[dict]:
        """The host's events as one element, as discoveries gathered over a window arrive (decision 3914)."""
        return self._apply(self.frontier.on_events(HOST, list(events), self.now))

    def discover(self, *paths: str, priority: int = 5) -> list[dict]:
        return self.event(discovered(*paths, priority=priority))

    def advance(self, seconds: float) -> list[dict]:
        """Move the clock, firing due timers in order as Flink would."""
        out: list[dict] = []
        end = self.now + seconds
        while self.timers and min(self.timers) <= end * 1000:
            ts = min(self.timers)
            self.timers.discard(ts)
            self.now = max(self.now, ts / 1000)
            out += self._apply(self.frontier.on_timer(HOST, ts, self.now))
        self.now = end
        return out

    def robots(self, req: dict, http_status: int | None = 200, body: bytes = b"/private",
               fetch_status: str = "ok") -> list[dict]:
        return self.event({"v": 1, "type": "robots", "host": HOST, "lease_id": req["lease_id"],
                           "fetch_status": fetch_status, "http_status": http_status, "fetched_at": self.now,
                           "fetch_ms": 20.0, "body_b64": b64(body)})

    def render(self, path: str, reason: str = "app_root", depth: int = 1) -> list[dict]:
        """The WARC writer's `render` event for a page of the host (decision 3905)."""
        url = f"http://{HOST}{path}"
        return self.event(dict(render_event(HOST, url, url_fp(url), depth, reason)))

    def complete(self, req: dict, http_status: int | None = 200, fetch_status: str = "ok",
                 retry_after: float | None = None, redirect: str | None = None) -> list[dict]:
        return self.event({"v": 1, "type": "completion", "host": HOST, "lease_id": req["lease_id"],
                           "url": req["url"], "fp": req["fp"], "fetch_status": fetch_status,
                           "http_status": http_status, "started_at": self.now - 0.05, "done_at": self.now,
                           "fetch_ms": 50.0, "bytes": 100, "content_hash": None, "simhash": None, "etag": None,
                           "last_modified": None, "redirect": redirect, "retry_after": retry_after})
