"""The wheel on its own: built from this checkout, installed with the lock into a fresh virtual
environment outside it, and run from an empty directory: `crawler --version`, `crawler config` and a
short `crawler demo` (20 hosts, 20 s) that crawls and writes its outputs under that directory, its
downloads under `CRAWLER_HOME`, and nothing into the installed packages.

The test network has no registry, so the fresh environment installs from the wheelhouse `make
wheelhouse` downloads (every file checked against the lock's hashes), and `CRAWLER_HOME` borrows this
checkout's resolved Maven jars.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from crawler.paths import CACHE, ROOT
from tests.paths import SHARED

pytestmark = pytest.mark.integration

LOCK = ROOT / "requirements.lock"
WHEELHOUSE = CACHE / "wheelhouse"
INSTALL_TIMEOUT_S = 1200
DEMO_TIMEOUT_S = 600


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A fresh venv with the wheel and its locked dependencies; an empty working directory; a home."""
    if not (SHARED / "webdata").is_dir():
        pytest.skip(f"no webdata under {SHARED} for the demo's synthetic web")
    if not (WHEELHOUSE / ".stamp").is_file():
        pytest.skip(f"no wheelhouse at {WHEELHOUSE} (`make wheelhouse` downloads it; `make test` does so first)")
    if not (CACHE / "maven").is_dir():
        pytest.skip(f"no resolved Maven jars under {CACHE} to borrow (run `crawler install` first)")
    work = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CRAWLER_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
          str(ROOT)], work, env, INSTALL_TIMEOUT_S)
    wheel, = dist.glob("flink_crawler-*.whl")
    venv = work / "venv"
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "venv", str(venv)], work, env, INSTALL_TIMEOUT_S)
    offline = [str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELHOUSE)]
    _run([*offline, "--require-hashes", "--no-deps", "-r", str(WHEELHOUSE / "tools.txt")], work, env,
         INSTALL_TIMEOUT_S)
    _run([*offline, "--require-hashes", "--build-constraint", str(LOCK), "-c", str(LOCK), "-r",
          str(WHEELHOUSE / "runtime.txt")], work, env, INSTALL_TIMEOUT_S)
    _run([*offline, "--no-deps", str(wheel)], work, env, INSTALL_TIMEOUT_S)
    _run([str(python), "-m", "pip", "check"], work, env, INSTALL_TIMEOUT_S)
    home = work / "home"
    home.mkdir()
    (home / "maven").symlink_to(CACHE / "maven", target_is_directory=True)
    empty = work / "empty"
    empty.mkdir()
    env.update({"CRAWLER_HOME": str(home), "CRAWLER_SHARED_DIR": str(SHARED), "HOME": str(work / "user"),
                "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"})
    return {"venv": venv, "python": python, "home": home, "empty": empty, "env": env, "wheel": wheel}


def test_the_wheel_ships_the_synthetic_web_the_job_script_and_the_clusters_files(installed):
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    assert {"jobs/crawl.py", "synthweb/server.py", "crawler/flink-conf/config.yaml",
            "crawler/java/kafka/pom.xml", "crawler/java/flink-connectors/pom.xml"} <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/")) or n.endswith((".gz", ".jsonl"))]


def test_version_and_config_run_from_an_empty_directory(installed):
    env, empty = installed["env"], installed["empty"]
    version = _run(["crawler", "--version"], empty, env, 120).stdout
    assert version.startswith("crawler ") and "0.1.0" in version, version
    config = _run(["crawler", "config"], empty, env, 120).stdout
    assert "[politeness]" in config and "default_delay_s" in config, config[:500]
    assert _run([str(installed["python"]), "-m", "crawler", "--version"], empty, env, 120).stdout == version


def test_a_short_demo_crawls_from_the_wheel_and_writes_only_under_the_working_directory_and_home(installed):
    env, empty, home = installed["env"], installed["empty"], installed["home"]
    try:
        proc = _run(["crawler", "demo", "--hosts", "20", "--duration", "20"], empty, env, DEMO_TIMEOUT_S)
    finally:
        subprocess.run(["crawler", "down"], cwd=empty, env=env, capture_output=True, timeout=300)
    summary = json.loads((empty / "out" / "demo" / "summary.json").read_text())
    assert summary["fetched"] > 0 and summary["published"] > 0, summary
    assert list((empty / "out" / "demo" / "warc").rglob("*.warc.gz")), proc.stdout[-2000:]
    assert (home / "flink-home").is_dir() and (home / "stack").is_dir()
    site = Path(sysconfig.get_path("purelib", vars={"base": str(installed["venv"]),
                                                    "platbase": str(installed["venv"])}))
    assert not [p for p in ("out", ".cache") if (site / p).exists()], sorted(p.name for p in site.iterdir())
