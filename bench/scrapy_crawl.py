"""Scrapy on the synthetic web at politeness matched to ours: the comparison crawler of `bench.crawl_bench`.

`python -m bench.scrapy_crawl --seeds seeds.txt --host-map hosts.txt --seconds 60 --out DIR` crawls
from the seeds for a bounded time and leaves in DIR: `scrapy_stats.json` (Scrapy's stats plus its own
CPU seconds), `scrapy_samples.jsonl` (scheduler depth and responses over time) and `scrapy.log`.

Every setting comes from our configuration (`scrapy_settings`), so both crawlers obey the same robots
group, delay, depth, size, timeout, redirect and retry limits (docs/decisions/1500-scrapy-matched-politeness.md).
Scrapy can only reach the synthetic web: `HostMapMiddleware` refuses every request whose host is not
in the host map (IP literals included: Twisted never asks a resolver about those), and
`HostMapResolver` answers only from the same map, whose addresses must all be loopback.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import resource
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from scrapy import Request, Spider, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.http import TextResponse
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from twisted.internet.task import LoopingCall
from zope.interface import implementer

from udfs.netguard import parse_host_map

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
STATS_FILE = "scrapy_stats.json"
SAMPLES_FILE = "scrapy_samples.jsonl"


def load_host_map(text: str) -> dict[str, str]:
    """`hostname ip` lines (the crawler's `--host-map` file) → {name: ip}; only loopback addresses.

    Scrapy must only ever connect to 127.x. Raises ValueError naming the first line
    that is malformed or points outside 127.0.0.0/8, so a wrong file stops the run before any request.
    """
    pins: dict[str, str] = {}
    for name, addresses in parse_host_map(text).items():
        address = addresses[0]
        if ipaddress.ip_address(address) not in LOOPBACK:
            raise ValueError(f"host map entry {name} -> {address} is not a loopback (127.0.0.0/8) address")
        pins[name.lower().rstrip(".")] = address
    return pins


def scrapy_settings(config: Any, *, seconds: float, host_map_file: Path, out: Path,
                    concurrency: int = 1000, sample_every_s: float = 5.0) -> dict[str, Any]:
    """Scrapy settings matched to our policies (`udfs.config.load_config`), so both crawlers run equally polite.

    One request at a time per download slot, the slot being the host's address (per-IP, as our IP gate),
    our default delay with no jitter and no AutoThrottle, robots.txt obeyed for our User-Agent, our
    depth, URL length, body size, timeout, redirect and retry limits; BFO order and no cookies as in
    Scrapy's "Broad crawls" guide; no telnet console (nothing listens).
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if sample_every_s <= 0:
        raise ValueError(f"sample_every_s must be positive, got {sample_every_s}")
    return {
        "BOT_NAME": "bench",
        "USER_AGENT": config.fetch.user_agent,
        "ROBOTSTXT_OBEY": True,
        "ROBOTSTXT_USER_AGENT": config.frontier.robots_agent,
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,   # applies per slot; the slot is the IP (HostMapMiddleware)
        "CONCURRENT_REQUESTS_PER_IP": 0,       # the default DownloaderAwarePriorityQueue refuses it
        "DOWNLOAD_DELAY": config.politeness.default_delay_s,
        "DOWNLOAD_DELAY_JITTER": 0.0,
        "AUTOTHROTTLE_ENABLED": False,
        "DEPTH_LIMIT": config.traps.max_crawl_depth,
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "URLLENGTH_LIMIT": config.urls.max_length,
        "DOWNLOAD_MAXSIZE": config.fetch.max_body_bytes,
        "DOWNLOAD_WARNSIZE": 0,
        "DOWNLOAD_TIMEOUT": config.fetch.total_timeout_s,
        "REDIRECT_MAX_TIMES": config.frontier.max_redirect_hops,
        "RETRY_TIMES": config.frontier.max_attempts - 1,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "CLOSESPIDER_TIMEOUT": seconds,
        "TWISTED_DNS_RESOLVER": "bench.scrapy_crawl.HostMapResolver",
        "DOWNLOADER_MIDDLEWARES": {"bench.scrapy_crawl.HostMapMiddleware": 50},  # before robots (100)
        "EXTENSIONS": {"bench.scrapy_crawl.BenchSampler": 500},
        "HOSTMAP_FILE": str(host_map_file),
        "BENCH_OUT": str(out),
        "BENCH_SAMPLE_EVERY": sample_every_s,
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(out / "scrapy.log"),
    }


def followable(base_url: str, hrefs: Sequence[str]) -> Iterator[str]:
    """The http(s) links of a page, absolute (mailto:, javascript: and the like are not requests)."""
    for href in hrefs:
        url = urljoin(base_url, href.strip())
        if urlsplit(url).scheme in ("http", "https"):
            yield url


def _process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- Scrapy components, loaded by Scrapy from the dotted names in `scrapy_settings` ---------------------

@implementer(IResolverSimple)
class HostMapResolver:
    """Answers host names from the host map only; anything else fails as a DNS lookup error."""

    def __init__(self, reactor: Any, pins: dict[str, str]) -> None:
        self.reactor = reactor
        self.pins = pins
        self.answered: set[str] = set()
        self.refused = 0

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> HostMapResolver:
        text = Path(crawler.settings["HOSTMAP_FILE"]).read_text(encoding="utf-8")
        return cls(reactor, load_host_map(text))

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Any:  # noqa: N802 (Twisted API)
        address = self.pins.get(name.lower().rstrip("."))
        if address is None:
            self.refused += 1
            return defer.fail(DNSLookupError(f"{name} is not in the host map"))
        self.answered.add(address)
        return defer.succeed(address)

class HostMapMiddleware:
    """Refuses hosts outside the map and puts every request in its address's download slot."""

    def __init__(self, crawler: Any) -> None:
        self.stats = crawler.stats
        self.pins = load_host_map(Path(crawler.settings["HOSTMAP_FILE"]).read_text(encoding="utf-8"))

    @classmethod
    def from_crawler(cls, crawler: Any) -> HostMapMiddleware:
        return cls(crawler)

    def process_request(self, request: Any, spider: Any = None) -> None:
        host = (urlparse_cached(request).hostname or "").lower().rstrip(".")
        address = self.pins.get(host)
        if address is None:
            self.stats.inc_value("hostmap/refused")
            raise IgnoreRequest(f"{host or request.url!r} is not in the host map")
        self.stats.inc_value("hostmap/allowed")
        request.meta["download_slot"] = address  # one slot per address = per-IP politeness

class BenchSampler:
    """Writes scheduler depth and response counts every few seconds, and the stats at the end.

    Once the spider is closing (CLOSESPIDER_TIMEOUT), it also drops the requests waiting in the
    download slots: Scrapy would otherwise send them all, one per delay per slot, before closing
    (minutes on a trap host with a thousand queued URLs), and the run would not be bounded.
    """

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.out = Path(crawler.settings["BENCH_OUT"])
        self.every = crawler.settings.getfloat("BENCH_SAMPLE_EVERY")
        self.file = (self.out / SAMPLES_FILE).open("w", encoding="utf-8")
        self.loop = LoopingCall(self.sample)
        self.closing_watch = LoopingCall(self.drop_queued_when_closing)
        crawler.signals.connect(self.opened, signal=signals.spider_opened)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> BenchSampler:
        return cls(crawler)

    def opened(self, spider: Any) -> None:
        self.loop.start(self.every, now=True)
        self.closing_watch.start(0.5, now=False)

    def drop_queued_when_closing(self) -> None:
        engine_slot = getattr(self.crawler.engine, "_slot", None)
        if engine_slot is None or engine_slot.closing is None:
            return
        dropped = 0
        for slot in self.crawler.engine.downloader.slots.values():
            while slot.queue:
                _request, waiting = slot.queue.popleft()
                waiting.errback(IgnoreRequest("bench: the crawl's time is up"))
                dropped += 1
        self.crawler.stats.inc_value("bench/dropped_at_close", dropped)

    def sample(self) -> None:
        engine = self.crawler.engine
        scheduler = getattr(engine, "_slot", None) and engine._slot.scheduler
        stats = self.crawler.stats
        self.file.write(json.dumps({
            "at": time.monotonic(), "scheduled": len(scheduler) if scheduler is not None else None,
            "active": len(engine.downloader.active), "responses": stats.get_value("bench/pages", 0),
            "cpu_s": round(_process_cpu_s(), 3)}) + "\n")
        self.file.flush()

    def closed(self, spider: Any, reason: str) -> None:
        for loop in (self.loop, self.closing_watch):
            if loop.running:
                loop.stop()
        self.sample()
        self.file.close()
        from twisted.internet import reactor

        resolver = getattr(reactor, "resolver", None)
        answered = sorted(getattr(resolver, "answered", ()))
        stats = self.crawler.stats
        stats.set_value("hostmap/resolver", type(resolver).__name__)
        stats.set_value("hostmap/addresses_answered", len(answered))
        stats.set_value("hostmap/non_loopback_answers",
                        [a for a in answered if ipaddress.ip_address(a) not in LOOPBACK])
        stats.set_value("hostmap/resolver_refused", getattr(resolver, "refused", None))
        stats.set_value("bench/cpu_s", round(_process_cpu_s(), 3))
        stats.set_value("bench/finish_reason", reason)
        plain = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in stats.get_stats().items()}
        (self.out / STATS_FILE).write_text(json.dumps(plain, indent=1, sort_keys=True, default=str) + "\n")

class BenchSpider(Spider):
    """Follows every http(s) link of every HTML page; counts pages, keeps nothing."""

    name = "bench"

    def __init__(self, seeds: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seeds = seeds

    async def start(self) -> AsyncIterator[Any]:
        for url in self.seeds:
            yield Request(url, callback=self.parse)

    def parse(self, response: Any) -> Iterator[Any]:
        self.crawler.stats.inc_value("bench/pages")
        if not isinstance(response, TextResponse):
            return
        for url in followable(response.url, response.css("a::attr(href)").getall()):
            yield Request(url, callback=self.parse)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scrapy_crawl", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=Path, required=True)
    parser.add_argument("--host-map", type=Path, required=True)
    parser.add_argument("--seconds", type=float, required=True, help="CLOSESPIDER_TIMEOUT")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=1000, help="CONCURRENT_REQUESTS")
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--config", type=Path, help="TOML file of our configuration overrides")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = parser.parse_args(argv)

    from scrapy.crawler import CrawlerProcess

    from crawler.crawl import read_seed_file
    from udfs.config import load_config

    config = load_config(args.config.read_text(encoding="utf-8") if args.config else "", args.overrides)
    load_host_map(args.host_map.read_text(encoding="utf-8"))  # fail here, loudly, on a bad map
    args.out.mkdir(parents=True, exist_ok=True)
    settings = scrapy_settings(config, seconds=args.seconds, host_map_file=args.host_map.resolve(),
                               out=args.out.resolve(), concurrency=args.concurrency,
                               sample_every_s=args.sample_every)
    process = CrawlerProcess(settings)
    process.crawl(BenchSpider, seeds=read_seed_file(args.seeds))
    process.start()
    return 0 if (args.out / STATS_FILE).exists() else 1


if __name__ == "__main__":
    sys.exit(main())
