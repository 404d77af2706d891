"""The packages' layers: each imports only the layers below it (docs/architecture.md), so the pure
core stays pure and the job's operators know nothing of the CLI or the consumers.

    udfs       pure logic: no I/O, no PyFlink
    durable    fsync, the audit log, the object store: imports udfs only
    bus        Kafka outside Flink's connectors (records, offsets, retention gaps): imports udfs only
    operators  the job's Flink functions: udfs, durable, bus
    jobs       the job graph: operators, udfs, durable, bus
    consumers  readers of the crawl's topics outside the job: udfs, durable
    crawler    the CLI: everything above, and synthweb for the demo
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"udfs", "durable", "bus", "operators", "jobs", "consumers", "crawler", "synthweb", "tests", "bench"}
MAY_IMPORT = {
    "udfs": {"udfs"},
    "durable": {"durable", "udfs"},
    "bus": {"bus", "udfs"},
    "operators": {"operators", "durable", "bus", "udfs"},
    "jobs": {"jobs", "operators", "durable", "bus", "udfs"},
    "consumers": {"consumers", "durable", "udfs"},
    "synthweb": {"synthweb", "udfs"},
    "crawler": {"crawler", "consumers", "jobs", "operators", "durable", "bus", "udfs", "synthweb"},
}
NO_PYFLINK = {"udfs", "durable", "bus", "consumers", "synthweb"}


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
    assert not crossings(), f"imports against the layers (module, imported package): {sorted(crossings())}"


@pytest.mark.parametrize("package", sorted(NO_PYFLINK))
def test_the_pure_and_outside_the_job_packages_do_not_import_pyflink(package):
    assert not [str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py") if "pyflink" in imports_of(p)]
