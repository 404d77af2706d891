"""Parse's CPU on the crawl benchmark's pages: the native work a page needs, timed alone, against the
whole parse step in one process.

    .venv/bin/python -m bench.bench_page_path [--pages 400] [--hosts 5000] [--seed 1]

Pages come from the synthetic web `bench.crawl_bench` crawls (same size and seed), as its server sends
them. Each native step is timed alone over all pages, best of three, in CPU time of this process:
inflating the gzip form the server sends (zlib-ng, as the fetcher does), deflating the payload at the
job's WARC level (libdeflate, as parse packs the response block), the three digests of a page (the
content hash, sha256, and the WARC payload and block digests, sha1), decoding UTF-8, and lexbor
parsing the page, selecting its links with their hrefs and reading its body text. Then the whole parse
step with the job's default policies (`parse_result` + `pack_payload`). What the whole step takes
beyond the native steps is parse's Python; in the crawl, the worker's record handling (gRPC, coders)
comes on top. No network, no files; bounded loops.
"""
from __future__ import annotations

import argparse
import hashlib
import random
import time
from collections.abc import Callable
from typing import Any

import deflate as libdeflate
from selectolax.lexbor import LexborHTMLParser
from zlib_ng import zlib_ng

from udfs.page_facts import pack_payload, parse_result
from synthweb.generate import build_web, default_corpus
from synthweb.model import WebPolicy
from synthweb.render import Router
from udfs.config import load_config
from udfs.warc import WarcBuilder

PORT = 8080
_GZIP_WINDOW = 16 + 15    # zlib-ng wbits: a gzip member, 32 KB window


def served_pages(n_pages: int, n_hosts: int, seed: int) -> list[tuple[str, str, Any]]:
    """(host, url, reply) of `n_pages` HTML pages answered 200, drawn at random from the benchmark's web."""
    web = build_web(n_hosts, seed, WebPolicy())
    router = Router(web, default_corpus(), PORT)
    rng = random.Random(seed)
    pages: list[tuple[str, str, Any]] = []
    for _ in range(n_pages * 20):   # bounded: most draws are pages; errors and redirects are skipped
        if len(pages) == n_pages:
            break
        host = rng.choice(web.hosts)
        path = rng.choice(host.pages).path
        reply = router.respond(host.name, host.ip, "GET", path)
        if reply.status == 200 and isinstance(reply.body, bytes) and reply.gzip is not None \
                and b"<html" in reply.body[:2000].lower():
            pages.append((host.name, f"http://{host.name}:{PORT}{path}", reply))
    return pages


def fetch_result(host: str, url: str, reply: Any) -> dict[str, Any]:
    """The FetchResult the fetcher hands parse for this reply (body decoded, as it stores it)."""
    request = {"host": host, "url": url, "fp": "0" * 16, "kind": "page", "lease_id": f"{host}/r-1", "depth": 1,
               "attempt": 1}
    return {"request": request, "fetch_status": "ok", "reason": "", "http_status": 200, "http_reason": "OK",
            "headers": list(reply.headers), "request_headers": [("User-Agent", "bench/1.0")], "body": reply.body,
            "ip": "127.0.0.1", "started_at": 1.0, "done_at": 2.0, "truncated": None}


def best_ms_per_page(step: Callable[[], object], n_pages: int, repeats: int = 3) -> float:
    """The step's CPU time over all pages, best of `repeats`, per page."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        step()
        best = min(best, time.process_time() - started)
    return best / n_pages * 1000


def lexbor_work(html: str) -> int:
    """What extraction asks of lexbor for a page, without our code around it."""
    tree = LexborHTMLParser(html, scripting=True)
    hrefs = sum(1 for node in tree.css("a[href], area[href]") if node.attributes.get("href"))
    body = tree.body
    return hrefs + (len(body.text(deep=True, separator=" ")) if body is not None else 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--hosts", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    config = load_config("", [])
    pages = served_pages(args.pages, args.hosts, args.seed)
    n = len(pages)
    bodies = [reply.body for _, _, reply in pages]
    gzipped = [reply.gzip() for _, _, reply in pages]
    htmls = [body.decode("utf-8", "replace") for body in bodies]
    level = config.warc.gzip_level
    print(f"{n} pages of the {args.hosts}-host web (seed {args.seed}), median body "
          f"{sorted(map(len, bodies))[n // 2] / 1000:.1f} KB, median gzip form {sorted(map(len, gzipped))[n // 2] / 1000:.1f} KB")

    inflate = "inflate the server's gzip form (zlib-ng)"
    native = {
        inflate: lambda: [zlib_ng.decompress(g, _GZIP_WINDOW) for g in gzipped],
        f"deflate the payload, level {level} (libdeflate)": lambda: [libdeflate.deflate_compress(b, level)
                                                                     for b in bodies],
        "digests: sha256 + sha1 payload + sha1 block": lambda: [
            (hashlib.sha256(b).digest(), hashlib.sha1(b).digest(), hashlib.sha1(b).digest()) for b in bodies],
        "decode UTF-8": lambda: [b.decode("utf-8", "replace") for b in bodies],
        "lexbor: parse, links and hrefs, body text": lambda: [lexbor_work(h) for h in htmls],
    }
    results = [fetch_result(host, url, reply) for host, url, reply in pages]
    builder = WarcBuilder(config.warc)

    def whole_parse() -> None:
        for result in results:
            pack_payload(parse_result(result, config.extract, config.optout, None, config.sitemaps), builder)

    whole_parse()   # warm-up: imports, the language model, caches
    spent = {label: best_ms_per_page(step, n) for label, step in native.items()}
    for label, ms in spent.items():
        print(f"  {label:<48} {ms:6.3f} ms/page")
    total = sum(spent.values())
    print(f"  {'native steps together':<48} {total:6.3f} ms/page")
    parse_ms = best_ms_per_page(whole_parse, n)
    in_parse = total - spent[inflate]   # the inflate happens in the fetcher, not in parse
    print(f"  {'whole parse step (parse_result + pack_payload)':<48} {parse_ms:6.3f} ms/page")
    print(f"  {'of it native (the steps above but inflate)':<48} {in_parse:6.3f} ms/page "
          f"({100 * in_parse / parse_ms:.0f}%); Python and the rest {parse_ms - in_parse:.3f} ms/page")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
