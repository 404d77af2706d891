"""How fast udfs.warc builds, serialises and gzips records: bounded loops, no I/O, no network.

    .venv/bin/python -m bench.bench_warc [--records N] [--body-kb KB] [--pages N]

Prints records/s and MB/s (of uncompressed record bytes) for each step on an HTML-like body of
the design brief's average size (80 KB), and the gzip ratio per level. Then, on real pages from
webdata, zlib-ng (what the crawler uses, decision 1822) against the standard library's zlib, side
by side: gzip of each page's response record, and inflating the page as a server sent it gzipped;
and the response block packed where the page is parsed against the writer gzipping the whole record
(decision 1823), deflated by libdeflate (decision 1831) against a zlib-ng stream.
"""
from __future__ import annotations

import argparse
import gzip
import itertools
import statistics
import time
import zlib
from datetime import datetime, timezone

import deflate as libdeflate
from zlib_ng import zlib_ng

from bench.bench_extract import load
from udfs.fetch_status import CappedDecoder
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
    parser.add_argument("--pages", type=int, default=200, help="real pages for the zlib-ng vs zlib comparison")
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
    compare_engines(builder, headers, args.pages)


def compare_engines(builder: WarcBuilder, headers: list[tuple[str, str]], limit: int) -> None:
    """zlib-ng (`to_gzip`, `CappedDecoder`) against stdlib zlib on the response records of real pages."""
    pages = load("scrapinghub_aeb", limit)
    records = [builder.capture(url, [("Host", "bench.example")], 200, "OK", headers, body, ip="127.0.0.1")[0]
               for url, body in pages]
    wire = [gzip.compress(body) for _, body in pages]
    sizes = [len(record.to_bytes()) for record in records]
    raw = sum(sizes)
    print(f"\n{len(records)} real pages (webdata scrapinghub_aeb), response records median "
          f"{statistics.median(sizes) / 1024:.0f} KB; CPU ms per record, gzip ratio")
    for level in (1, 6):
        ng_ms, ng_out = cpu_ms_each(records, lambda record: record.to_gzip(level))
        std_ms, std_out = cpu_ms_each(records, lambda record: gzip.compress(record.to_bytes(), compresslevel=level,
                                                                           mtime=0))
        print(f"gzip level {level}: zlib-ng {ng_ms:.2f} ms ratio {ng_out / raw:.3f} | "
              f"stdlib zlib {std_ms:.2f} ms ratio {std_out / raw:.3f}")
    compare_packed(builder, headers, pages, records, raw)
    ng_ms, _ = cpu_ms_each(wire, lambda member: CappedDecoder("gzip", 1 << 26).feed(member))
    std_ms, _ = cpu_ms_each(wire, lambda member: zlib.decompressobj(wbits=31).decompress(member, 1 << 26))
    print(f"inflate a gzipped page: zlib-ng (CappedDecoder) {ng_ms:.2f} ms | stdlib zlib {std_ms:.2f} ms")


def compare_packed(builder: WarcBuilder, headers: list[tuple[str, str]], pages: list[tuple[str, bytes]],
                   records: list, raw: int) -> None:
    """Decision 1823: the response block packed where the page is parsed, joined into the member by the
    writer, against the writer compressing the whole record; CPU of each side and the size it costs."""
    packed = [builder.pack_response(200, "OK", headers, body) for _, body in pages]
    joined = [builder.response(url, 0, "", [], block, ip="127.0.0.1") for (url, _), block in zip(pages, packed)]
    pack_ms, _ = cpu_ms_each(pages, lambda page: builder.pack_response(200, "OK", headers, page[1]).deflated)
    join_ms, joined_out = cpu_ms_each(joined, lambda record: record.to_gzip(6))
    whole_ms, whole_out = cpu_ms_each(records, lambda record: record.to_gzip(6))
    print(f"level 6, packed in parse (decision 1823): pack {pack_ms:.2f} ms (digests included) + writer "
          f"{join_ms:.3f} ms, {joined_out / whole_out - 1:+.2%} bytes | writer alone {whole_ms:.2f} ms; "
          f"packed block {sum(len(b.deflated) for b in packed) / raw:.3f} of the records' bytes")
    blocks = [block.inflate() for block in packed]
    size = sum(map(len, blocks))
    for level in (5, 6):
        lib_ms, lib_out = cpu_ms_each(blocks, lambda block: libdeflate.deflate_compress(block, level))
        ng_ms, ng_out = cpu_ms_each(blocks, lambda block: _zlib_ng_raw(block, level))
        print(f"deflate a response block at level {level}: libdeflate (pack, decision 1831) {lib_ms:.2f} ms ratio "
              f"{lib_out / size:.4f} | zlib-ng stream {ng_ms:.2f} ms ratio {ng_out / size:.4f}")


def _zlib_ng_raw(block: bytes, level: int) -> bytes:
    compressor = zlib_ng.compressobj(level, zlib_ng.DEFLATED, -zlib_ng.MAX_WBITS)
    return compressor.compress(block) + compressor.flush()


def cpu_ms_each(items: list, fn) -> tuple[float, int]:
    """CPU ms per item of `fn(item)` over `items`, and the total length of what it returned."""
    start, out = time.process_time(), 0
    for item in items:
        out += len(fn(item))
    return (time.process_time() - start) * 1000 / len(items), out


if __name__ == "__main__":
    main()
