"""Where the crawler keeps things: shipped files in the package, downloads under a home of their own,
outputs under the working directory."""
from __future__ import annotations

from pathlib import Path

from crawler.paths import FLINK_CONF, HOME_ENV, JAVA, OUT, PACKAGE, crawler_home, is_checkout


def test_the_flink_template_and_every_jar_set_ship_inside_the_package():
    assert FLINK_CONF.parent == PACKAGE and JAVA.parent == PACKAGE
    assert (FLINK_CONF / "config.yaml").is_file()
    assert sorted(p.parent.name for p in JAVA.glob("*/pom.xml")) == ["flink-connectors", "jwarc", "kafka", "s3proxy"]


def test_crawler_home_wins_wherever_the_code_runs(tmp_path):
    assert crawler_home({HOME_ENV: str(tmp_path / "home")}, root=tmp_path) == tmp_path / "home"


def test_a_checkout_keeps_its_downloads_in_its_own_cache_folder(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    assert is_checkout(tmp_path)
    assert crawler_home({}, root=tmp_path) == tmp_path / ".cache"


def test_an_installed_crawler_keeps_its_downloads_in_the_users_cache_directory(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    site.mkdir()
    assert not is_checkout(site)
    assert crawler_home({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, root=site) == tmp_path / "xdg" / "flink-crawler"
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert crawler_home({}, root=site) == tmp_path / "user" / ".cache" / "flink-crawler"


def test_outputs_go_under_the_working_directory():
    assert not OUT.is_absolute() and OUT == Path("out")
