"""The synthetic web finds its real pages outside the package, and says where it looked when it cannot."""
from __future__ import annotations

from pathlib import Path

import pytest

from synthweb.corpus import Corpus
from synthweb.webdata import CHECKOUT, SHARED_ENV, WEBDATA_ENV, WebdataMissing, webdata_dir


def test_the_webdata_variable_wins_over_the_shared_folder_and_the_checkout(tmp_path):
    env = {WEBDATA_ENV: str(tmp_path / "pages"), SHARED_ENV: str(tmp_path / "shared")}
    assert webdata_dir(env) == tmp_path / "pages"


def test_the_shared_folder_holds_webdata_when_no_webdata_folder_is_named(tmp_path):
    assert webdata_dir({SHARED_ENV: str(tmp_path)}) == tmp_path / "webdata"


def test_a_checkout_reads_the_shared_folder_beside_it():
    assert webdata_dir({}) == (CHECKOUT.parent / "shared" / "webdata").resolve()


def test_a_corpus_without_pages_names_the_folder_and_both_variables(tmp_path):
    with pytest.raises(WebdataMissing) as caught:
        Corpus(tmp_path)
    message = str(caught.value)
    assert str(tmp_path) in message and WEBDATA_ENV in message and SHARED_ENV in message


def test_the_package_ships_no_publisher_pages():
    package = Path(__file__).resolve().parents[2] / "synthweb"
    assert not [p for p in package.rglob("*") if p.suffix in {".gz", ".html", ".tsv", ".jsonl"}]


def test_the_demo_without_webdata_stops_before_any_download_with_what_to_set(tmp_path, monkeypatch, capsys):
    from crawler import cli, demo

    monkeypatch.setenv(WEBDATA_ENV, str(tmp_path))
    monkeypatch.setattr(demo, "install", lambda: pytest.fail("the demo downloaded before checking its web"))
    assert cli.main(["demo", "--out", str(tmp_path / "out")]) == 2
    assert WEBDATA_ENV in capsys.readouterr().err
