"""The frontier's decisions for one host, as pure functions over plain state values.

The keyed operator (`operators/frontier.py`) owns these state handles per host (decision 0800) and
delegates every decision to the modules of this package:
- the host row (`HostState`, JSON text with a schema version): robots state, politeness clock,
  backoff, the one lease in flight, and the heads/tails of ten FIFO queues (one per priority);
- queue slots (MapState slot key → `QueueItem` row): a slot key is `priority * 2**40 + seq`, so
  push and pop are one state write each and no queue is ever read whole;
- the URL table (MapState signed url_fp → `UrlRecord` row): a url_fp is admitted only when it has
  no row, or its last fetch is older than one crawl cycle (docs/architecture.md §2 invariant 3);
- the robots.txt body as received (base64 text), parsed lazily by the operator;
- the `/.well-known/tdmrep.json` body as received (base64 text; "" = no file), likewise.

Robots first (§2 invariant 2): until the host's robots.txt is known and fresh, the only thing ever
leased is robots.txt itself; while it is unreachable (5xx, 429, timeouts, network errors) nothing is
leased but a robots retry with exponential backoff; 4xx means allow all (RFC 9309 §2.3.1.3; the
status table is udfs.robots.robots_verdict_for_status).
TDMRep file second (decision 1930): when the caller turns it on, a host whose robots.txt is
fresh but whose tdmrep.json is unknown or expired leases that file next, through the same politeness;
any answer but a 2xx (and a lease expiry, or robots.txt disallowing the file) means "no file" until
the robots.txt TTL, so a missing file, the normal case, costs one request per host and TTL.
One lease per host (§2 invariant 1): `plan` never leases while one is in flight; a lease ends with
its matching completion or at its deadline (the URL then goes back to its queue, up to a park limit).
Traps and redirects (decision 0804): every discovered URL is screened by the trap rules
(udfs.traps.check_url, with the host's session summary kept in the host row) before its URL-table
row is even read; redirect targets carry a hop count, capped; a 301/308 marks its source URL moved
and a 302/303/307 keeps it canonical (RFC 9110 §15.4). A host whose URL table grows faster than
`fast_growth_urls` per window is flagged once per window (decision 0805).
Recrawl (decisions 1110-1113): a fetched URL's row keeps its `UrlHistory`, due time, value
(depth) and the WARC capture a later 304 revisit refers to; `on_completion` feeds `udfs.recrawl.observe`
and `next_due`; due URLs come back through `recrawl_item` into a recrawl lane of `tiers` front queues
beside the discovery priorities, and `pop_lane` splits releases between the lanes. A scheduled URL is
not admitted again by rediscovery before its due time: the schedule owns it.
Nothing here reads a clock: `now` is always a parameter (epoch seconds).

The modules, each importing only from the ones above it:
- `policy`: `FrontierPolicy`, the limits;
- `rows`: the state records and their rows (host, lease, queue slot, URL table, captures, due buckets);
- `pages`: what a URL's row knows about its page (value, in-links, hub yield, canonical claims);
- `sitemaps`: robots.txt sitemaps as entries, sitemap hints and lastmod due times;
- `host_budget`: a host's importance, page budget and domain share;
- `queues`: push and pop over the discovery priorities and the recrawl tiers;
- `admission`: entries checked, screened by the trap rules and admitted, or dropped with a `Verdict`;
- `release`: `plan` and the leases it hands out, and the host's next timer;
- `renders`: render events admitted into the host row and leased as its next page (decision 3905);
- `outcomes`: the end of a page lease (completion, retry, park, recrawl schedule, parse strikes);
- `preflight`: the end of a robots.txt, tdmrep.json or soft-404 probe lease;
- `expiry`: lease expiry and extension.
"""
