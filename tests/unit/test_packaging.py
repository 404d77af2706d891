"""What `pip install .` and the lock file promise, checked from the files themselves (decision 3810).

- Every module the wheel ships (the packages `[tool.setuptools.packages.find]` includes) imports only the
  standard library, the wheel's own packages and distributions declared in `[project] dependencies`:
  so `pip install .` without extras gives a `crawler` whose modules import. An import of a test-only
  distribution (one under `[test]`) or of an undeclared one fails here, naming the file and line.
- Every declared dependency (runtime and `[test]`) is pinned with `==`, and `requirements.lock` holds the
  same version with hashes: the lock was made from this pyproject.toml (`make lock`).
- The environment running the tests has every package of the lock at the locked version: it was built
  from the lock (`make install`), so the suite runs against the versions it is known good with.

The imports are read with `ast` (top-level and inside functions), and import names are mapped to
distributions with `importlib.metadata.packages_distributions()` of the running environment, which
holds every locked package.
"""
from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]  # the checkout: pyproject.toml and the packages beside it
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = ROOT / "requirements.lock"
# Installer and build tools: in the lock (so builds are hash-checked too) but a venv brings its own, and
# the code under test does not run on them.
BUILD_TOOLS = frozenset({"pip", "setuptools", "wheel"})
# First-party modules that packaged code imports although the wheel does not ship them, each with why.
# An entry no longer imported fails the test below, so the list only shrinks.
NOT_SHIPPED_YET: dict[str, str] = {}


def _declared(requirements: list[str]) -> dict[str, Requirement]:
    parsed = [Requirement(text) for text in requirements]
    return {canonicalize_name(r.name): r for r in parsed}


RUNTIME = _declared(PYPROJECT["project"]["dependencies"])
TEST = _declared(PYPROJECT["project"]["optional-dependencies"]["test"])


def packaged_top_levels() -> list[str]:
    """The top-level packages `[tool.setuptools.packages.find]` puts in the wheel."""
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    assert set(find) <= {"include", "exclude", "where", "namespaces"}, f"unread find options: {find}"
    assert find.get("where", ["."]) == ["."], "packages are looked up beside pyproject.toml"
    include, exclude = find.get("include", ["*"]), find.get("exclude", [])
    names = [p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()]
    found = [name for name in names
             if any(fnmatch.fnmatchcase(name, pattern) for pattern in include)
             and not any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude)]
    return sorted(found)


def packaged_imports() -> dict[str, list[str]]:
    """Top-level name of every absolute import in the packaged modules -> the places ('file:line')."""
    places: dict[str, list[str]] = {}
    for package in packaged_top_levels():
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    places.setdefault(module.split(".")[0], []).append(
                        f"{path.relative_to(ROOT)}:{node.lineno}")
    return places


def third_party_imports() -> dict[str, list[str]]:
    first_party = set(packaged_top_levels()) | {"__future__"}
    return {name: where for name, where in packaged_imports().items()
            if name not in sys.stdlib_module_names and name not in first_party and name not in NOT_SHIPPED_YET}


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    marker: Marker | None
    hashes: tuple[str, ...]


def read_lock() -> dict[str, Locked]:
    """requirements.lock as uv writes it: `name==version[ ; marker] \\`, then `--hash=sha256:...` lines."""
    heads: dict[str, tuple[str, Marker | None]] = {}
    hashes: dict[str, list[str]] = {}
    name = ""
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if head := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;\s*(.+?))?\s*\\?$", line):
            name = canonicalize_name(head.group(1))
            assert name not in heads, f"{name} is locked twice"
            heads[name] = (head.group(2), Marker(head.group(3)) if head.group(3) else None)
            hashes[name] = []
        elif digest := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", line):
            hashes[name].append(digest.group(1))
        else:
            assert not line.strip() or line.lstrip().startswith("#"), f"unexpected lock line: {line!r}"
    return {n: Locked(n, version, marker, tuple(hashes[n])) for n, (version, marker) in heads.items()}


def test_the_scan_covers_every_package_of_the_wheel() -> None:
    assert {"udfs", "operators", "jobs", "crawler", "consumers"} <= set(packaged_top_levels())


def test_packaged_code_imports_only_the_stdlib_its_own_packages_and_runtime_dependencies() -> None:
    by_import = importlib.metadata.packages_distributions()
    undeclared = {}
    for name, where in sorted(third_party_imports().items()):
        distributions = {canonicalize_name(d) for d in by_import.get(name, [])}
        if not distributions & set(RUNTIME):
            undeclared[name] = (sorted(distributions) or ["not installed"], where[:3])
    assert not undeclared, ("imported by packaged code but not a runtime dependency in pyproject.toml "
                            f"(import -> distributions, where): {undeclared}")


def test_first_party_modules_the_wheel_lacks_are_only_the_known_ones() -> None:
    first_party_unshipped = {name for name in packaged_imports()
                             if (ROOT / name / "__init__.py").is_file() and name not in packaged_top_levels()}
    assert first_party_unshipped == set(NOT_SHIPPED_YET), (
        "packaged code imports first-party modules the wheel does not ship, or NOT_SHIPPED_YET names one it "
        f"no longer imports: imported {sorted(first_party_unshipped)}, known {sorted(NOT_SHIPPED_YET)}")


def test_the_import_scan_sees_the_dependencies_that_issue_38_found_missing() -> None:
    imports = third_party_imports()
    assert "consumers/warc_compact.py" in " ".join(imports["warcio"])
    assert "operators/fetch.py" in " ".join(imports["yarl"])
    assert {"pyflink", "aiohttp", "confluent_kafka", "numpy"} <= set(imports)


def test_every_dependency_is_pinned_and_locked_at_that_version_with_hashes() -> None:
    lock = read_lock()
    for name, requirement in {**RUNTIME, **TEST}.items():
        pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        assert len(pins) == 1 and len(requirement.specifier) == 1, f"{requirement} is not pinned with =="
        assert name in lock, f"{name} is declared but not in requirements.lock: run `make lock`"
        assert lock[name].version == pins[0], f"{requirement} but the lock has {lock[name].version}: run `make lock`"
    assert set(RUNTIME).isdisjoint(TEST), f"declared twice: {sorted(set(RUNTIME) & set(TEST))}"
    assert BUILD_TOOLS <= set(lock), "the lock holds the installer and build tools too"
    assert all(entry.hashes for entry in lock.values()), [e.name for e in lock.values() if not e.hashes]


def test_the_running_environment_is_the_locked_one() -> None:
    wrong = {}
    for entry in read_lock().values():
        if entry.name in BUILD_TOOLS or (entry.marker is not None and not entry.marker.evaluate()):
            continue
        try:
            installed = importlib.metadata.version(entry.name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != entry.version:
            wrong[entry.name] = (entry.version, installed)
    assert not wrong, f"(locked, installed) differ; rebuild the venv with `make install`: {wrong}"
