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

.PHONY: install wheelhouse pywb-wheels lock test test-unit test-integration demo bench bench-udfs bench-crawl bench-state bench-freshness bench-render clean

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

# pywb 2.10.0 and every package it pulls in, pinned, as wheels for the test that replays a crawl through
# pywb in a venv of its own (tests/integration/test_pywb_replay.py; decision 3865). surt comes only as a
# source distribution: built into a wheel here with the lock's setuptools. Downloaded again when the pins change.
PYWB_WHEELS := .cache/pywb-wheels
PYWB_PINS := pywb==2.10.0 surt==0.3.1 warcio==1.8.1 brotlipy==0.7.0 certauth==1.3.0 certifi==2026.10.19.post1 \
    cffi==2.1.1 charset-normalizer==3.5.3 cryptography==47.0.0 defusedxml==0.7.1 fakeredis==0.16.0 \
    filelock==4.3.2 gevent==26.9.0 greenlet==3.5.6 idna==3.21 Jinja2==3.1.6 MarkupSafe==3.0.4 \
    portalocker==4.4.2 Py3AMF==0.9.1 pycparser==3.12 pyOpenSSL==26.1.0 python-dateutil==4.0.0 PyYAML==6.0.4 \
    redis==2.10.6 requests==2.34.2 requests-file==3.0.1 six==1.17.0 tldextract==5.4.0 \
    typing_extensions==4.16.0 tzdata==2026.6 ua-parser==1.0.2 ua-parser-builtins==202610 urllib3==2.8.0 \
    webassets==2.0 webencodings==0.6.1 Werkzeug==3.1.7 wsgiprox==1.5.2 zope.event==6.2 zope.interface==8.7

pywb-wheels: | install
	@if [ "$$(cat $(PYWB_WHEELS)/.stamp 2>/dev/null)" != "$(PYWB_PINS)" ]; then \
	    set -e; rm -rf $(PYWB_WHEELS); mkdir -p $(PYWB_WHEELS); \
	    printf '%s\n' $(PYWB_PINS) > $(PYWB_WHEELS)/requirements.txt; \
	    set -x; $(PY) -m pip wheel -q --no-deps --build-constraint $(LOCK) -w $(PYWB_WHEELS) \
	        -r $(PYWB_WHEELS)/requirements.txt; set +x; \
	    echo "$(PYWB_PINS)" > $(PYWB_WHEELS)/.stamp; fi

lock: $(UV)
	printf '%s\n' $(LOCK_TOOLS) | $(UV) pip compile pyproject.toml - --extra test --universal \
	    --python-version 3.11 --generate-hashes --custom-compile-command 'make lock' --quiet $(LOCK_FLAGS) -o $(LOCK)

$(UV):
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q uv==$(UV_VERSION)

# Every test, inside a loopback-only network namespace (see scripts/in-netns.sh).
test: install wheelhouse pywb-wheels
	scripts/in-netns.sh $(PY) -m pytest $(PYTEST_ARGS)

test-unit: install
	scripts/in-netns.sh $(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: install wheelhouse pywb-wheels
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

# The rendering tier: a rendered page's CPU, time and memory against a plain one (about a minute), and the
# crawl's rate with the tier off and at a 2% and a 10% render share (about 12 minutes). Need Chromium.
bench-render: install
	scripts/in-netns.sh $(PY) -m bench.bench_render --write
	$(PY) -m bench.render_share --write

bench: bench-udfs bench-state bench-crawl

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis
