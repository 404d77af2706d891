"""The `crawler` command's global options (crawler/cli.py): `--version`, `--log-level LEVEL` / `-v`, and
`python -m crawler` as the same command."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.cli import build_parser, main

VERSION = importlib.metadata.version("flink-crawler")


def test_version_prints_the_installed_distributions_version(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"crawler {VERSION}\n"


def test_version_without_the_distribution_installed_says_so(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 2
    assert capsys.readouterr().err == "crawler: flink-crawler is not installed (pip install .)\n"


def test_python_dash_m_crawler_is_the_same_command_from_any_directory(tmp_path: Path) -> None:
    version = subprocess.run([sys.executable, "-m", "crawler", "--version"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert (version.returncode, version.stdout, version.stderr) == (0, f"crawler {VERSION}\n", "")
    config = subprocess.run([sys.executable, "-m", "crawler", "-v", "config", "--set", "bloom.no_such_key=1"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert config.returncode == 2 and "no_such_key" in config.stderr
    bare = subprocess.run([sys.executable, "-m", "crawler"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: crawler")


@pytest.mark.parametrize(("argv", "level"), [
    (["config"], None),                                   # nothing given: each command keeps its own logging
    (["-v", "config"], "DEBUG"),
    (["--verbose", "config"], "DEBUG"),
    (["config", "-v"], "DEBUG"),                          # after the sub-command too
    (["--log-level", "warning", "config"], "WARNING"),    # case-insensitive
    (["config", "--log-level", "ERROR"], "ERROR"),
    (["-v", "config", "--log-level", "INFO"], "INFO"),    # the last one given counts
    (["--log-level", "ERROR", "-v", "config"], "DEBUG"),
    (["--log-level", "INFO", "status"], "INFO"),           # every sub-command has them
    (["takedown", "--host", "a.test", "-v"], "DEBUG"),
])
def test_log_level_and_verbose_are_parsed_before_or_after_the_sub_command(argv: list[str], level: str | None) -> None:
    assert getattr(build_parser().parse_args(argv), "log_level", None) == level


@pytest.mark.parametrize("argv", [
    ["--log-level", "LOUD", "config"],
    ["config", "--log-level"],
    ["--log-level", "config"],
])
def test_a_bad_log_level_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2 and "usage:" in capsys.readouterr().err


# main() configures logging for the whole process, so each case runs in a process of its own: `crawler config`
# with the options, then one line logged at each level.
PROBE = """
import logging, sys
from crawler.cli import main
code = main(sys.argv[1:])
print("root level", logging.getLevelName(logging.getLogger().level), "handlers", len(logging.getLogger().handlers))
for level in ("DEBUG", "INFO", "WARNING", "ERROR"):
    logging.getLogger("crawler.probe").log(getattr(logging, level), "probe at %s", level)
sys.exit(code)
"""


@pytest.mark.parametrize(("options", "root", "shown"), [
    ([], "WARNING handlers 0", ["WARNING", "ERROR"]),   # left alone: Python's last-resort handler, no format
    (["-v"], "DEBUG handlers 1", ["DEBUG", "INFO", "WARNING", "ERROR"]),
    (["--log-level", "info"], "INFO handlers 1", ["INFO", "WARNING", "ERROR"]),
    (["--log-level", "ERROR"], "ERROR handlers 1", ["ERROR"]),
])
def test_the_level_given_configures_logging_for_the_process(tmp_path: Path, options: list[str], root: str,
                                                            shown: list[str]) -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE, "config", *options], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert f"root level {root}" in probe.stdout
    logged = [line for line in probe.stderr.splitlines() if "probe at" in line]
    assert [line.rsplit(" ", 1)[1] for line in logged] == shown
    if options:   # LOG_FORMAT: time, logger, level, message
        assert all(re.fullmatch(rf"\S+ \S+ crawler\.probe {level} probe at {level}", line)
                   for line, level in zip(logged, shown)), logged
