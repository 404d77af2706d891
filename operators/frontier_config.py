"""What the host frontier decides with: its policies and which of its optional features are on, as one
frozen record. `FrontierFunction` builds it once from the job's sections; tests build their own."""
from __future__ import annotations

from dataclasses import dataclass

from udfs.budgets import BudgetPolicy
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import RECRAWL_TIERS
from udfs.host_quality import DEFAULT_QUALITY_POLICY, QualityPolicy
from udfs.optout import DEFAULT_OPTOUT_POLICY, OptOutPolicy
from udfs.politeness import DEFAULT_POLITENESS_POLICY, PolitenessPolicy
from udfs.recrawl import RecrawlPolicy
from udfs.render_policy import RenderPolicy
from udfs.robots import DEFAULT_ROBOTS_POLICY, RobotsPolicy
from udfs.sitemaps import SitemapPolicy
from udfs.soft404 import Soft404Policy
from udfs.traps import DEFAULT_TRAP_POLICY, TrapPolicy


@dataclass(frozen=True)
class HostFrontierConfig:
    """The host frontier's policies. A feature whose policy is None is off; the `*_on` properties say so.

    policy: per-host limits, leases and due buckets (`[frontier]`).
    politeness: the gaps between a host's fetches (`[politeness]`); an operator rate limit replaces its
        default gap for one host.
    robots_policy: robots.txt lifetimes and retries (`[robots]`).
    traps: the trap rules that screen discovered URLs (`[traps]`).
    quality: the host-quality signal that demotes the new URLs of hosts serving duplicates (`[host_quality]`).
    optout: the AI agents whose robots.txt verdict a released page carries, and whether each host's
        tdmrep.json is leased after its robots.txt (`[optout]`, decision 1930).
    recrawl: the recrawl schedule (`[recrawl]`, decision 1110); None (default): no fetch history, no
        schedule, one discovery lane. On, it needs the due-bucket state.
    soft404: the soft-404 probe of each host with a queue (`[soft404]`, decision 1844); None (default):
        no probes and no checks.
    budgets: the pages-per-day and URLs-per-round token budgets (`[budgets]`, decision 1805); None
        (default): no budgets.
    census: whether each host asks the domain census for its share of its domain's budgets
        (decision 1811); only with `budgets` (default False).
    sitemaps: following the Sitemap: lines of robots.txt (`[sitemaps]`, decision 1812); None (default):
        not followed.
    render: the rendering tier (`[render]`, decision 3905): with it enabled, `render` events queue their
        pages for render leases; None (default) or disabled: every render event is ignored and counted.
    rules_cache_size: hosts whose parsed robots.txt and tdmrep.json rules are kept (8,192).
    states_cache_size: hosts whose parsed row is kept (8,192; decision 1838).
    """

    policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY
    politeness: PolitenessPolicy = DEFAULT_POLITENESS_POLICY
    robots_policy: RobotsPolicy = DEFAULT_ROBOTS_POLICY
    traps: TrapPolicy = DEFAULT_TRAP_POLICY
    quality: QualityPolicy = DEFAULT_QUALITY_POLICY
    optout: OptOutPolicy = DEFAULT_OPTOUT_POLICY
    recrawl: RecrawlPolicy | None = None
    soft404: Soft404Policy | None = None
    budgets: BudgetPolicy | None = None
    census: bool = False
    sitemaps: SitemapPolicy | None = None
    render: RenderPolicy | None = None
    rules_cache_size: int = 8192
    states_cache_size: int = 8192

    def __post_init__(self) -> None:
        if self.recrawl is not None and self.recrawl.tiers > RECRAWL_TIERS:
            raise ValueError(f"recrawl.tiers must be at most {RECRAWL_TIERS} (the frontier's recrawl queues), "
                             f"got {self.recrawl.tiers}")

    @property
    def recrawl_on(self) -> bool:
        return self.recrawl is not None

    @property
    def soft404_on(self) -> bool:
        return self.soft404 is not None

    @property
    def budgets_on(self) -> bool:
        return self.budgets is not None

    @property
    def census_on(self) -> bool:
        """Domain shares: asked for only when there are budgets to share."""
        return self.census and self.budgets is not None

    @property
    def sitemaps_on(self) -> bool:
        return self.sitemaps is not None

    @property
    def render_on(self) -> bool:
        """Whether render events are admitted and waiting renders leased."""
        return self.render is not None and self.render.enabled

    @property
    def tdmrep_on(self) -> bool:
        """Whether tdmrep.json is leased after robots.txt (given a state to keep its body in)."""
        return self.optout.tdmrep_fetched

    @property
    def ai_agents(self) -> tuple[str, ...]:
        """The agents whose robots.txt verdict a released page carries (none when robots.txt signals are off)."""
        return self.optout.ai_agents if self.optout.use_robots else ()

    @property
    def due_bucket_ms(self) -> int:
        return int(round(self.policy.due_bucket_s * 1000))


DEFAULT_HOST_FRONTIER_CONFIG = HostFrontierConfig()
