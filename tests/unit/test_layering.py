"""The packages' layers: each imports only the layers below it (docs/architecture.md), so the pure
core stays pure and the job's operators know nothing of the CLI or the consumers.

    udfs       pure logic: no I/O, no PyFlink
    durable    fsync, the audit log, the object store: imports udfs only
    operators  the job's Flink functions: udfs, durable
    jobs       the job graph: operators, udfs, durable
    consumers  readers of the crawl's topics outside the job: udfs, durable
    crawler    the CLI: everything above, and synthweb for the demo
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"udfs", "durable", "operators", "jobs", "consumers", "crawler", "synthweb", "tests", "bench"}
MAY_IMPORT = {
    "udfs": {"udfs"},
    "durable": {"durable", "udfs"},
    "operators": {"operators", "durable", "udfs"},
    "jobs": {"jobs", "operators", "durable", "udfs"},
    "consumers": {"consumers", "durable", "udfs"},
    "synthweb": {"synthweb", "udfs"},
    "crawler": {"crawler", "consumers", "jobs", "operators", "durable", "udfs", "synthweb"},
}
# Imports against the layers that are still to be moved, each with where it goes. An entry no longer
# found fails the test below, so the list only shrinks.
KNOWN_EXCEPTIONS = {
    ("operators/retention_gap.py", "crawler"): "the retention-gap check reads Kafka through crawler.kafka_io; "
                                                "both belong in a Kafka I/O module below operators",
    ("jobs/crawl.py", "crawler"): "the job's start offsets come from crawler.retention_gap: the same module",
}
NO_PYFLINK = {"udfs", "durable", "consumers", "synthweb"}


def imports_of(path: Path) -> set[str]:
    """Top-level names of every absolute import in a module, at any depth (function-level too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def crossings() -> set[tuple[str, str]]:
    found = set()
    for package, allowed in MAY_IMPORT.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in imports_of(path) & FIRST_PARTY - allowed:
                found.add((str(path.relative_to(ROOT)), name))
    return found


def test_every_package_imports_only_the_layers_below_it():
    unexpected = crossings() - set(KNOWN_EXCEPTIONS)
    assert not unexpected, f"imports against the layers (module, imported package): {sorted(unexpected)}"


def test_the_known_exceptions_still_exist():
    assert set(KNOWN_EXCEPTIONS) <= crossings(), "an exception is gone: remove it from KNOWN_EXCEPTIONS"


@pytest.mark.parametrize("package", sorted(NO_PYFLINK))
def test_the_pure_and_outside_the_job_packages_do_not_import_pyflink(package):
    assert not [str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py") if "pyflink" in imports_of(p)]
