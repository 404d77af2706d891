"""How fast udfs.warc builds, serialises and gzips records: bounded loops, no I/O, no network.

    .venv/bin/python bench/bench_warc.py [--records N] [--body-kb KB]

Prints records/s and MB/s (of uncompressed record bytes) for each step on an HTML-like body of
the design brief's average size (80 KB), and the gzip ratio per level.
"""
from __future__ import annotations

import argparse
import itertools
import time
from datetime import datetime, timezone

from udfs.warc import WarcBuilder, cdxj_line


def html_body(kb: int) -> bytes:
    # Markup with some repetition and some variety, so gzip ratios look like real pages'.
    rows = (f'<tr><td class="c{i % 7}"><a href="/item/{i}?ref=list">Item {i}</a></td>'
            f"<td>{(i * 7919) % 100003}</td></tr>\n" for i in itertools.count())
    out = bytearray(b"<!doctype html><html><head><title>bench</title></head><body><table>\n")
    while len(out) < kb * 1024:
        out += next(rows).encode()
    return bytes(out[: kb * 1024])


def timed(label: str, n: int, fn, nbytes: int) -> None:
    # CPU time of this process, so figures hold on a machine shared with other work.
    start = time.process_time()
    for _ in range(n):
        fn()
    elapsed = time.process_time() - start
    print(f"{label:<34} {n / elapsed:>9.0f} records/s {nbytes * n / elapsed / 1e6:>8.1f} MB/s (per CPU second)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--body-kb", type=int, default=80)
    args = parser.parse_args()

    counter = itertools.count()
    fixed = datetime(2026, 1, 1, tzinfo=timezone.utc)
    builder = WarcBuilder(ids=lambda: f"<urn:uuid:00000000-0000-4000-8000-{next(counter):012d}>", clock=lambda: fixed)
    body = html_body(args.body_kb)
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"),
               ("Transfer-Encoding", "chunked"), ("Server", "bench"), ("Date", "Thu, 01 Jan 2026 00:00:00 GMT")]
    url = "http://bench.example/item/1?ref=list"

    def build():
        return builder.capture(url, [("Host", "bench.example"), ("User-Agent", "bench/1")], 200, "OK",
                               headers, body, ip="127.0.0.1")

    response, request = build()
    size = len(response.to_bytes())
    n = args.records
    print(f"body {len(body)} B, response record {size} B, request record {len(request.to_bytes())} B, {n} iterations")
    timed("build response+request (2 digests)", n, build, size)
    timed("to_bytes", n, response.to_bytes, size)
    for level in (1, 6, 9):
        timed(f"to_gzip level {level}", n, lambda: response.to_gzip(level), size)
        print(f"{'':<34} gzip ratio {len(response.to_gzip(level)) / size:.3f}")
    def archive_one() -> str:
        record = build()[0]
        return cdxj_line(record.info, "crawl/x.warc.gz", 0, len(record.to_gzip(6)))

    timed("build + to_gzip(6) + cdxj_line", n, archive_one, size)


if __name__ == "__main__":
    main()
