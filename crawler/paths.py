"""Where the crawler keeps things on disk.

- `PACKAGE`: files shipped in the wheel beside the code: the Flink configuration template
  (`flink-conf/config.yaml`) and the Maven coordinates of every jar set (`java/<name>/pom.xml`).
- `CACHE`: everything downloaded or started on first use (Maven jars, the Flink home, the local
  stack's state): `CRAWLER_HOME` when set; else `.cache/` in a checkout (git-ignored, so `rm -rf .cache`
  resets it); else the user's cache directory (`$XDG_CACHE_HOME/flink-crawler`, `~/.cache/flink-crawler`).
- `OUT`: what a run produces (WARC files, summaries, the audit log): `out/` under the working directory.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent   # the checkout, or site-packages for an installed wheel
JAVA = PACKAGE / "java"
FLINK_CONF = PACKAGE / "flink-conf"
HOME_ENV = "CRAWLER_HOME"


def is_checkout(root: Path = ROOT) -> bool:
    """Whether the code runs from a source checkout (pyproject.toml beside the packages)."""
    return (root / "pyproject.toml").is_file()


def crawler_home(environ: Mapping[str, str] = os.environ, root: Path = ROOT) -> Path:
    """The folder of downloads and local state, by the order in the module's docstring."""
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV]).expanduser().resolve()
    if is_checkout(root):
        return (root / ".cache").resolve()
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return (cache / "flink-crawler").resolve()


CACHE = crawler_home()
OUT = Path("out")   # relative: under the working directory of the command
