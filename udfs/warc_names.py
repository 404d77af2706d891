"""Names of the crawl's WARC files: unique across crawls, writers and machines (decision 3834).

A file is named as the IIPC's WARC guidelines and Heritrix name theirs, `{prefix}-{timestamp}-{serial}-
{host}.warc.gz`: the crawl's name, the UTC moment the file was opened to the millisecond (17 digits),
the writer folder's serial number (5 digits or more) and the machine with the writer subtask
(`{hostname}~{subtask}`). Each part keeps only letters, digits, `.`, `_` and `~` (anything else
becomes `_`), so the four parts split on `-` again. The name doubles as the warcinfo's `WARC-Filename`,
which is therefore unique too. Its index is the same name ending in `.cdxj`.

Files an earlier release named `{serial}.warc.gz` are still read: their serials number on.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

WARC_SUFFIX = ".warc.gz"
INDEX_SUFFIX = ".cdxj"
MAX_PART_CHARS = 64   # a longer crawl name or host name is cut to this

_UNSAFE = re.compile(r"[^A-Za-z0-9._~]")
_NAMED = re.compile(r"^[A-Za-z0-9._~]+-\d{17}-(\d{5,})-[A-Za-z0-9._~]+\.warc\.gz$")
_SERIAL_ONLY = re.compile(r"^(\d+)\.warc\.gz$")


def name_part(text: str) -> str:
    """`text` as one part of a file name: unsafe characters become `_`, at most MAX_PART_CHARS."""
    return _UNSAFE.sub("_", text)[:MAX_PART_CHARS] or "_"


def warc_file_name(prefix: str, opened_at: float, serial: int, hostname: str, subtask: int) -> str:
    """The name of the WARC file a writer subtask opens at `opened_at` (epoch seconds) as its folder's
    `serial`-th file."""
    moment = datetime.fromtimestamp(opened_at, timezone.utc)
    stamp = moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"
    return f"{name_part(prefix)}-{stamp}-{serial:05d}-{name_part(hostname)}~{subtask}{WARC_SUFFIX}"


def warc_file_serial(name: str) -> int | None:
    """The serial number of a writer folder's WARC file named `name`; None for any other name."""
    match = _NAMED.match(name) or _SERIAL_ONLY.match(name)
    return int(match.group(1)) if match else None


def index_name(warc_name: str) -> str:
    """The name (or path) of the CDXJ index beside the WARC file `warc_name`."""
    if not warc_name.endswith(WARC_SUFFIX):
        raise ValueError(f"not a WARC file name: {warc_name!r}")
    return warc_name[:-len(WARC_SUFFIX)] + INDEX_SUFFIX
