"""bench.run_udfs's writers: each module's block in docs/perf/pure-core.md, one headline row for each in BENCHMARKS.md."""
from __future__ import annotations

import pytest

from bench import run_udfs as ru

URLS_OUTPUT = """links: 100000 hrefs, 100000 absolute http(s) URLs (71109 distinct)
normalize_url + url_fp                    468,755 URLs/s
w3lib canonicalize_url                    123,569 URLs/s
ratio ours / w3lib                           3.79x"""


def _block(module: str, output: str, exit_code: int = 0) -> str:
    return "\n".join([f"<!-- {module}:begin -->", f"### `{module}`: what", "",
                      "Run 2026-12-03 15:10 UTC on 2 cores (Intel(R) Xeon(R) Processor), Python 3.11.7; load average "
                      f"before the run 1.0; took 7 s; exit {exit_code}.", "", "```", output, "```", f"<!-- {module}:end -->"])


def _detail(*blocks: str) -> str:
    return "# Pure core\n\n" + ru.BLOCKS_BEGIN + "\n\n" + "\n\n".join(blocks) + "\n\n" + ru.BLOCKS_END + "\n"


def test_every_benchmark_run_has_a_headline() -> None:
    assert {module for module, _, _ in ru.RUNS} == set(ru.HEADLINES)


def test_headline_fills_the_template_from_the_output_and_gives_up_when_a_pattern_misses() -> None:
    assert ru.headline("bench.bench_urls", URLS_OUTPUT) == (
        "normalize_url + url_fp 468,755 URLs/s; w3lib canonicalize_url 123,569 (ours / w3lib 3.79x)")
    assert ru.headline("bench.bench_urls", URLS_OUTPUT.replace("ratio", "quotient")) is None
    assert ru.headline("bench.unknown", URLS_OUTPUT) is None


def test_summary_row_names_the_run_and_points_to_the_block_when_it_failed_or_has_no_headline() -> None:
    assert ru.summary_row("bench.bench_urls", _block("bench.bench_urls", URLS_OUTPUT)) == (
        "| `bench_urls` | normalize_url + url_fp 468,755 URLs/s; w3lib canonicalize_url 123,569 (ours / w3lib 3.79x) "
        "| 2026-12-03, Intel Xeon |")
    assert "| failed (exit 1) |" in ru.summary_row("bench.bench_urls", _block("bench.bench_urls", "Traceback", 1))
    assert "| see its block |" in ru.summary_row("bench.bench_urls", _block("bench.bench_urls", "changed output"))


def test_replace_block_swaps_a_block_and_adds_a_new_one_before_the_end_marker() -> None:
    old, new = _block("bench.bench_urls", "old"), _block("bench.bench_urls", URLS_OUTPUT)
    detail = _detail(old)
    assert ru.replace_block(detail, "bench.bench_urls", new) == _detail(new)
    added = ru.replace_block(detail, "bench.bench_warc", _block("bench.bench_warc", "w"))
    assert list(ru.blocks(added)) == ["bench.bench_urls", "bench.bench_warc"]
    assert added.index("bench.bench_warc:end") < added.index(ru.BLOCKS_END)


def test_summary_lists_blocks_in_run_order_and_replaces_only_its_section() -> None:
    detail = _detail(_block("bench.bench_warc", "w"), _block("bench.bench_urls", URLS_OUTPUT))
    section = ru.render_summary(detail)
    assert section.startswith(ru.BEGIN) and section.endswith(ru.END)
    assert section.index("`bench_urls`") < section.index("`bench_warc`")   # RUNS order, not the file's
    assert "[docs/perf/pure-core.md](docs/perf/pure-core.md)" in section
    text = f"# Benchmarks\n\nbefore\n\n{ru.BEGIN}\nold\n{ru.END}\n\nafter\n"
    assert ru.replace_summary(text, detail) == f"# Benchmarks\n\nbefore\n\n{section}\n\nafter\n"
    appended = ru.replace_summary("# Benchmarks\n", detail)
    assert ru.HEADING in appended and appended.endswith(section + "\n")


def test_main_writes_the_block_and_the_table(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(ru, "DETAIL", tmp_path / "docs" / "perf" / "pure-core.md")
    monkeypatch.setattr(ru, "BENCHMARKS", tmp_path / "BENCHMARKS.md")
    ru.DETAIL.parent.mkdir(parents=True)
    monkeypatch.setattr(ru, "run_one", lambda module, args, what: _block(module, URLS_OUTPUT))
    assert ru.main(["bench_urls"]) == 0
    assert list(ru.blocks(ru.DETAIL.read_text())) == ["bench.bench_urls"]
    assert "| `bench_urls` | normalize_url + url_fp 468,755 URLs/s" in ru.BENCHMARKS.read_text()


def test_the_committed_blocks_each_give_a_headline_and_the_table_is_current() -> None:
    detail = ru.DETAIL.read_text()
    found = ru.blocks(detail)
    rows = [ru.summary_row(module, block) for module, block in found.items()]
    assert rows and not [row for row in rows if "| see its block |" in row or "| failed (exit" in row]
    assert ru.render_summary(detail) in ru.BENCHMARKS.read_text()
