# The commands a newcomer types. `make demo` crawls the bundled synthetic web; `make test` runs the tests.
# Both install what is missing first (virtualenv, Python packages, Maven jars, Flink home) under .venv/ and .cache/.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test test-unit test-integration demo bench bench-udfs bench-crawl bench-state bench-freshness clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m crawler.cli install
	@touch $(STAMP)

# Every test, inside a loopback-only network namespace (see scripts/in-netns.sh).
test: install
	scripts/in-netns.sh $(PY) -m pytest $(PYTEST_ARGS)

test-unit: install
	scripts/in-netns.sh $(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install
	scripts/in-netns.sh $(PY) -m pytest tests/integration $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/crawler demo

bench-udfs: install
	scripts/in-netns.sh $(PY) -m bench.run_udfs

# The whole crawler against Scrapy on the same synthetic web (15-20 minutes; see BENCHMARKS.md).
bench-crawl: install
	$(PY) -m bench.crawl_bench --hosts 5000 --seconds 300 --write

# Recrawl freshness of the crawl job on the synthetic web with an accelerated clock: ours vs uniform vs
# halve/x1.5 (about 30 minutes; issue #6, decisions 1809-1810).
bench-freshness: install
	$(PY) -m bench.freshness_web --write

# Bytes of frontier state per known URL, from real RocksDB checkpoints.
bench-state: install
	scripts/in-netns.sh $(PY) -m bench.bench_state

bench: bench-udfs bench-state bench-crawl

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis
