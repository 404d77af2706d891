"""Time sitemap parsing (and, for the link path beside it, the trap chain) on generated bodies.

Usage: .venv/bin/python -m bench.bench_sitemaps [--rounds 3]   (from the project root)
Bodies: a full 50,000-URL urlset with lastmod/changefreq/priority (~6 MB), the same gzipped, a
50,000-line text sitemap, the real sitemaps.org sitemap from ../shared/webdata, and a gzip bomb of
200 MB of whitespace (stops at the 50 MB cap). Trap chain: 50,000 URLs of mixed shapes through
`check_url`. Prints CPU seconds (process time: the machine is shared), URLs/s and MB/s, best of rounds,
and the peak RSS. Bounded loops, no network.
"""
from __future__ import annotations

import argparse
import calendar
import gzip
import resource
import time
import zlib
from collections.abc import Callable

from tests.paths import WEBDATA
from udfs.sitemaps import parse_sitemap
from udfs.traps import EMPTY_SUMMARY, TrapContext, check_url

N = 50_000


def urlset() -> bytes:
    rows = "".join(f"<url><loc>https://www.example.com/section-{i % 97}/page-{i}.html</loc>"
                   f"<lastmod>2024-{1 + i % 12:02d}-{1 + i % 28:02d}T10:00:00+00:00</lastmod>"
                   f"<changefreq>weekly</changefreq><priority>0.{i % 10}</priority></url>\n" for i in range(N))
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{rows}</urlset>\n").encode()


def bomb(megabytes: int = 200) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">')]
    parts += [packer.compress(b" " * (1 << 20)) for _ in range(megabytes)]
    return b"".join(parts) + packer.flush()


def best(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def trap_urls() -> list[str]:
    shapes = ["https://a.example/blog/post-{i}.html", "https://a.example/calendar/20{y:02d}/{m:02d}/",
              "https://a.example/p?sid={i:06d}abcdef&q=1", "https://a.example/deep" + "/x{i}" * 3,
              "https://a.example/search?q={i}&page=2&sort=asc&lang=en"]
    return [shapes[i % 5].format(i=i, y=i % 40, m=1 + i % 12) for i in range(N)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds

    xml = urlset()
    text = "\n".join(f"https://www.example.com/page-{i}.html" for i in range(N)).encode()
    sitemaps_org = (WEBDATA / "sitemaps_feeds" / "sitemap.xml").read_bytes()
    bodies = {  # name -> (body, uncompressed bytes read)
        "urlset 50k (xml)": (xml, len(xml)),
        "urlset 50k (gzip)": (gzip.compress(xml), len(xml)),
        "text 50k": (text, len(text)),
        "sitemaps.org (84 URLs)": (sitemaps_org, len(sitemaps_org)),
        "gzip bomb 200 MB": (bomb(), 52_428_800),
    }
    print(f"{'body':26} {'bytes in':>10} {'URLs':>6} {'CPU s':>7} {'URLs/s':>9} {'MB/s out':>9}  flags")
    for name, (body, out) in bodies.items():
        result = parse_sitemap(body)
        seconds = best(lambda: parse_sitemap(body), rounds)
        flags = ",".join(f for f in ("truncated", "size_capped") if getattr(result, f)) or "-"
        print(f"{name:26} {len(body):>10,} {len(result.entries):>6} {seconds:>7.3f} "
              f"{len(result.entries) / seconds:>9,.0f} {out / seconds / 1e6:>9.1f}  {flags}")

    urls = trap_urls()
    context = TrapContext(now_s=calendar.timegm((2026, 6, 15, 0, 0, 0)), depth=3, summary=EMPTY_SUMMARY)
    seconds = best(lambda: [check_url(u, context) for u in urls], rounds)
    rejected = sum(not check_url(u, context).accepted for u in urls)
    print(f"trap chain: {N:,} URLs in {seconds:.3f} CPU s = {N / seconds:,.0f} URLs/s "
          f"({seconds / N * 1e6:.1f} µs/URL), {rejected:,} rejected")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
