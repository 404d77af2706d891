# The commands a newcomer types. `make demo` crawls the bundled synthetic web; `make test` runs the tests.
# Both install what is missing first (virtualenv, Python packages, Maven jars, Flink home) under .venv/ and .cache/.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Every Python package at one version with its hashes: runtime, [test], and pip/setuptools/wheel (decision 3810).
LOCK   := requirements.lock
# `make lock` resolves pyproject.toml's runtime and [test] pins plus these tools with uv, keeping the versions
# already in the lock; `make lock LOCK_FLAGS=--upgrade` moves the unpinned ones to the newest.
LOCK_TOOLS := pip==26.3 setuptools==84.2.1 wheel==0.48.0
UV_VERSION := 0.13.8
UV_HOME := .cache/uv-$(UV_VERSION)
UV     := $(UV_HOME)/bin/uv

# The runtime closure of the lock as files, for the test that installs the wheel in a fresh venv where the
# test network reaches no registry (tests/integration/test_wheel_install.py).
WHEELHOUSE := .cache/wheelhouse

.PHONY: install wheelhouse lock test test-unit test-integration demo bench bench-udfs bench-crawl bench-state bench-freshness clean

install: $(STAMP)

# Re-run whenever pyproject.toml or the lock changes: pip brings each package to its locked version.
# pip comes first (the venv's own is too old for --build-constraint), then the lock with every hash
# checked, also those of the build tools that the few source distributions and the project are built
# with (--build-constraint), then the project itself, editable and without dependencies.
$(STAMP): pyproject.toml $(LOCK)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	sed -n '/^pip==/,/# via/p' $(LOCK) | $(PY) -m pip install -q --require-hashes --no-deps -r /dev/stdin
	$(PY) -m pip install -q --require-hashes --build-constraint $(LOCK) -r $(LOCK)
	$(PY) -m pip install -q --no-deps --build-constraint $(LOCK) -e .
	$(PY) -m pip check
	$(PY) -m crawler install
	@touch $(STAMP)

wheelhouse: $(WHEELHOUSE)/.stamp

# pip, setuptools and wheel (the fresh venv's own pip is too old for --build-constraint), then the runtime
# pins of pyproject.toml and what they pull in, every file checked against the lock's hashes.
$(WHEELHOUSE)/.stamp: pyproject.toml $(LOCK) | install
	mkdir -p $(WHEELHOUSE)
	for tool in pip setuptools wheel; do sed -n "/^$$tool==/,/# via/p" $(LOCK); done > $(WHEELHOUSE)/tools.txt
	$(PY) -m pip download -q --require-hashes --no-deps -d $(WHEELHOUSE) -r $(WHEELHOUSE)/tools.txt
	$(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
	    > $(WHEELHOUSE)/runtime.txt
	$(PY) -m pip download -q --require-hashes --build-constraint $(LOCK) -c $(LOCK) -d $(WHEELHOUSE) \
	    -r $(WHEELHOUSE)/runtime.txt
	@touch $@

lock: $(UV)
	printf '%s\n' $(LOCK_TOOLS) | $(UV) pip compile pyproject.toml - --extra test --universal \
	    --python-version 3.11 --generate-hashes --custom-compile-command 'make lock' --quiet $(LOCK_FLAGS) -o $(LOCK)

$(UV):
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q uv==$(UV_VERSION)

# Every test, inside a loopback-only network namespace (see scripts/in-netns.sh).
test: install wheelhouse
	scripts/in-netns.sh $(PY) -m pytest $(PYTEST_ARGS)

test-unit: install
	scripts/in-netns.sh $(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install wheelhouse
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
