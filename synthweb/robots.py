"""What /robots.txt answers on each host, per its `RobotsVariant`."""
from __future__ import annotations

from dataclasses import dataclass

from synthweb.corpus import Corpus
from synthweb.model import Host, RobotsVariant, Web, base_url

MOVED_PATH = "/robots-moved.txt"
HUGE_ROBOTS_BYTES = 600 * 1024  # over the 500 KiB a parser must read (RFC 9309 §2.5)
# The rule-heavy body: this many wildcard rules, all under one literal head. Each matches only a path under
# the head that ends in "z", so none of a host's pages, but a path under the head is checked against every
# one of them: more work than a crawler that bounds it may spend on one URL (udfs/robots.py, decision 3720).
RULE_HEAVY_RULES = 20_000
RULE_HEAVY_HEAD = "/a"   # /articles/... pages sit under it; no hostile entrance does
_TEXT = "text/plain; charset=utf-8"
_HTML = "text/html; charset=utf-8"


@dataclass(frozen=True)
class RobotsAnswer:
    """Status, headers and body of one robots.txt response."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


# The sitemaps an index host's /sitemap_index.xml lists, half its pages each; the second is a gzip file
# served as `application/gzip` without Content-Encoding, as servers send `sitemap.xml.gz` (decision 1817).
INDEX_CHILDREN = ("/sitemap-1.xml", "/sitemap-2.xml.gz")


def sitemap_path(host: Host) -> str | None:
    """Where the host's sitemap (urlset or index) lives, if it has one."""
    if host.sitemap is None:
        return None
    if host.sitemap == "elsewhere":
        return f"/sitemaps/{host.name}.xml"   # on host.sitemap_host
    return "/sitemap_index.xml" if host.sitemap == "index" else "/sitemap.xml"


def _sitemap_lines(host: Host, port: int) -> str:
    path = sitemap_path(host)
    return f"\nSitemap: {base_url(host.sitemap_host or host.name, port)}{path}\n" if path else ""


def rules_body(host: Host, port: int) -> bytes:
    """The plain-rules body (RULES, the target of REDIRECT): Disallow prefixes, maybe Crawl-delay."""
    delay = f"Crawl-delay: {host.crawl_delay:g}\n" if host.crawl_delay else ""
    gptbot = "User-agent: GPTBot\n" if host.gptbot_disallowed else ""
    return (f"# robots.txt for {host.name}\nUser-agent: *\nDisallow: /private/\nDisallow: /tmp/\n{delay}"
            f"\nUser-agent: BadBot\n{gptbot}Disallow: /\n{_sitemap_lines(host, port)}").encode()


def _wildcard_body(host: Host, port: int) -> bytes:
    delay = f"Crawl-delay: {host.crawl_delay:g}\n" if host.crawl_delay else ""
    return (f"User-agent: *\nDisallow: /*?sort=\nDisallow: /*.pdf$\nDisallow: /search\n"
            f"Allow: /docs/\n{delay}{_sitemap_lines(host, port)}").encode()


def _huge_body(host: Host, port: int) -> bytes:
    # The rule that matters comes first so a parser that stops at 500 KiB still sees it.
    head = f"User-agent: *\nDisallow: /private/\n{_sitemap_lines(host, port)}\n"
    filler = "".join(f"User-agent: archiver-{k}\nDisallow: /archive/{k}/\n\n" for k in range(20000))
    body = (head + "# archive agents\n" + filler).encode()
    return body if len(body) > HUGE_ROBOTS_BYTES else body + b"#" * (HUGE_ROBOTS_BYTES - len(body)) + b"\n"


def rule_heavy_body(host: Host, port: int) -> bytes:
    """The RULE_HEAVY body: RULE_HEAVY_RULES lines `Disallow: /a*<k>*z$` for every agent (about 440 KB,
    under the 500 KiB a parser must read whole), after the sitemap line."""
    rules = "".join(f"Disallow: {RULE_HEAVY_HEAD}*{k:05d}*z$\n" for k in range(RULE_HEAVY_RULES))
    return f"# robots.txt for {host.name}{_sitemap_lines(host, port)}\nUser-agent: *\n{rules}".encode()


def _real_body(host: Host, corpus: Corpus) -> bytes:
    # Real Crawl-delay values (10-60 s) would stall tests, and real Sitemap lines point outside.
    body = corpus.robots_body(host.robots_source or 0)
    keep = [line for line in body.splitlines(keepends=True)
            if not line.lstrip().lower().startswith((b"crawl-delay", b"sitemap"))]
    return b"".join(keep)


def robots_answer(web: Web, host: Host, corpus: Corpus, port: int) -> RobotsAnswer:
    """The response to GET /robots.txt on `host` (spec: task brief "robots.txt variants")."""
    v = host.robots
    if v is RobotsVariant.RULES:
        return RobotsAnswer(200, (("Content-Type", _TEXT),), rules_body(host, port))
    if v is RobotsVariant.WILDCARD:
        return RobotsAnswer(200, (("Content-Type", _TEXT),), _wildcard_body(host, port))
    if v is RobotsVariant.REAL:
        return RobotsAnswer(200, (("Content-Type", _TEXT),), _real_body(host, corpus))
    if v is RobotsVariant.HUGE:
        return RobotsAnswer(200, (("Content-Type", _TEXT),), _huge_body(host, port))
    if v is RobotsVariant.RULE_HEAVY:
        return RobotsAnswer(200, (("Content-Type", _TEXT),), rule_heavy_body(host, port))
    if v is RobotsVariant.EMPTY:
        return RobotsAnswer(200, (("Content-Type", _TEXT),), b"")
    if v is RobotsVariant.HTML_ERROR:
        return RobotsAnswer(200, (("Content-Type", _HTML),),
                            b"<!DOCTYPE html><html><head><title>Error</title></head><body><h1>Something went"
                            b" wrong</h1><p>Please try again later.</p></body></html>")
    if v is RobotsVariant.NOT_FOUND:
        return RobotsAnswer(404, (("Content-Type", _HTML),), b"<html><body><h1>404 Not Found</h1></body></html>")
    if v is RobotsVariant.SERVER_ERROR:
        return RobotsAnswer(503, (("Content-Type", _HTML),), b"<html><body><h1>503 Service Unavailable</h1></body></html>")
    if v is RobotsVariant.TOO_MANY:
        return RobotsAnswer(429, (("Content-Type", _HTML), ("Retry-After", str(web.policy.robots_retry_after))),
                            b"<html><body><h1>429 Too Many Requests</h1></body></html>")
    target = host.robots_redirect or host.name
    location = f"{base_url(target, port)}{MOVED_PATH}" if target != host.name else MOVED_PATH
    return RobotsAnswer(301, (("Location", location), ("Content-Type", _HTML)), b"<html><body>Moved</body></html>")


def effective_robots(web: Web, host: Host, corpus: Corpus, port: int = 80) -> tuple[int, bytes]:
    """The status and body a crawler ends with after following robots redirects (for audits)."""
    answer = robots_answer(web, host, corpus, port)
    if answer.status == 301:
        target = web.by_name.get(host.robots_redirect or host.name, host)
        return 200, rules_body(target, port)
    return answer.status, answer.body
