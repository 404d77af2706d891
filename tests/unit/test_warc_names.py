"""WARC file names: the IIPC form, unique per crawl, moment, serial and writer, and read back."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from udfs.warc_names import index_name, name_part, warc_file_name, warc_file_serial

OPENED = datetime(2026, 12, 6, 15, 4, 5, 678901, tzinfo=timezone.utc).timestamp()


def test_a_name_holds_the_crawl_the_millisecond_the_serial_and_the_writer():
    assert warc_file_name("news-2026", OPENED, 7, "tm-1.cluster", 3) == \
        "news_2026-20261206150405678-00007-tm_1.cluster~3.warc.gz"


def test_names_split_on_hyphens_into_four_parts_whatever_the_crawl_and_host_are_called():
    name = warc_file_name("My crawl / 2026-12", OPENED, 12, "pod-a-b\n", 0)
    prefix, stamp, serial, host = name[:-len(".warc.gz")].split("-")
    assert (prefix, stamp, serial, host) == ("My_crawl___2026_12", "20261206150405678", "00012", "pod_a_b_~0")


def test_serials_past_five_digits_keep_every_digit():
    assert warc_file_serial(warc_file_name("c", OPENED, 123456, "h", 0)) == 123456


@pytest.mark.parametrize("name, serial", [
    ("crawl-20261206150405678-00003-host~0.warc.gz", 3),
    ("00004.warc.gz", 4),          # the name an earlier release gave a folder's file
    ("crawl-20261206150405678-00003-host~0.cdxj", None),
    ("crawl-2026120615-00003-host~0.warc.gz", None),
    ("notes.txt", None),
    (".00001.warc.gz.tmp", None),
])
def test_the_serial_is_read_from_both_namings_and_nothing_else(name, serial):
    assert warc_file_serial(name) == serial


def test_two_writers_opening_the_same_serial_at_the_same_moment_get_different_names():
    assert warc_file_name("c", OPENED, 0, "h", 0) != warc_file_name("c", OPENED, 0, "h", 1)
    assert warc_file_name("c", OPENED, 0, "h", 0) != warc_file_name("c", OPENED, 0, "g", 0)
    assert warc_file_name("c", OPENED, 0, "h", 0) != warc_file_name("d", OPENED, 0, "h", 0)


def test_long_parts_are_cut_and_empty_ones_kept_visible():
    assert len(name_part("x" * 500)) == 64
    assert name_part("") == "_"


def test_the_index_is_named_after_its_warc_file():
    assert index_name("crawl/d/0/c-20261206150405678-00000-h~0.warc.gz") == "crawl/d/0/c-20261206150405678-00000-h~0.cdxj"
    with pytest.raises(ValueError, match="not a WARC file name"):
        index_name("crawl/d/0/notes.txt")
