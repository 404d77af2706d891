"""The counters the frontier keeps under the metric group `frontier` (docs/metrics.md): every admission
verdict, drop, lease and outcome counted, Scrapy-style."""
from __future__ import annotations

from udfs.frontier.admission import TRAP_METRICS, Verdict
from udfs.frontier.expiry import Extension
from udfs.frontier.renders import RENDER_METRICS
from udfs.frontier.rows import UrlStatus

# Counters under the metric group `frontier` (Scrapy-style stats: every drop and deny counted).
METRICS = tuple(v.value for v in Verdict) + TRAP_METRICS + (
    "released", "robots_leased", "robots_fetched", "robots_failed", "leases_expired", "leases_orphaned", "parked",
    "requeued", "completions_stale", "events_malformed", "hosts_fast_growing", "controls_applied",
    "controls_rejected",
    "bloom_reads_skipped", "bloom_false_positives", "bloom_hosts_loaded", "demoted_duplicate_host",
    UrlStatus.MOVED_PERMANENTLY.value, UrlStatus.REDIRECTED.value,
    # recrawl: scheduled after a fetch, due (bucket entry moved to the recrawl lane), stale
    # bucket entries skipped, recrawl-lane releases, what refetches saw (unchanged share), 304s
    "recrawl_scheduled", "recrawl_due", "recrawl_stale", "recrawl_released", "recrawl_unchanged",
    "recrawl_changed", "not_modified",
    # released pages whose robots.txt disallows a configured AI agent (FetchRequest.ai_disallowed)
    "ai_disallowed",
    # tdmrep.json leases, files found, hosts without one (any non-2xx, expiry, or robots.txt
    # disallowing it), and released pages whose file rule reserves TDM (FetchRequest.tdm_file = 1)
    "tdmrep_leased", "tdmrep_found", "tdmrep_absent", "tdm_file_reserved",
    # a ready host turned away because the subtask had its bound of leases out; a host not ready yet
    # (mostly one whose lease just came back) sent to wait for room at once, hosts turned away holding it
    "budget_waits", "budget_queued",
    # decision 3702: pages that ended at a hostile parse limit, and hosts held for reaching max_parse_strikes
    "parse_strikes", "hosts_held_parse_strikes",
    # decision 3781: page completions whose capture the writer lost (requeued, nothing charged)
    "completions_not_archived",
    # decision 3907: leases a fetch subtask handed back unsent, their host's address being another's
    "leases_misrouted",
    # decision 3909: robots.txt and tdmrep.json redirect hops to another server, leased next under its address
    "preflight_hops_handed_on",
    # soft-404 probes leased, hosts whose probe was answered 200 (their pages are
    # checked), and pages found to be the host's "not found" page
    "probe_leased", "probe_suspect", "probe_by_tdmrep", "soft_404",
    # questions to the domain census, and its answers (a host's share of its domain's budget)
    "census_asked", "domain_shares_heard",
    # sitemaps a robots.txt listed that were offered to the queues of the hosts serving
    # them, and those skipped (malformed, repeated, or past sitemaps.max_per_host)
    "sitemaps_listed", "sitemaps_skipped",
    # fetched pages whose sitemap lastmod brought their recrawl forward
    "sitemap_lastmod_forward",
    # pages kept on the record of the canonical they named until it is fetched, pages not
    # kept (the canonical keeps MAX_CANONICAL_ALIASES), and verdicts revised on crawl.status
    "canonical_claimed", "canonical_claims_over_limit", "canonical_revised",
    # the WARC writer's lease extensions applied, naming no lease the host holds, and
    # refused because the lease has had all of frontier.max_lease_extension_s
    Extension.EXTENDED.value, Extension.STALE.value, Extension.CAPPED.value,
) + (
    # decision 3905: render events admitted (in all and by the selection's reason) and ignored by why;
    # waiting renders leased, dropped at their lease by why, retried and given up
    RENDER_METRICS
)
