"""Durability on local disk: fsync a file's contents or a folder's entries (a rename, an unlink).

One home for the WARC writer (runs in Flink's Python workers), the corpus consumer and the
governance commands, which all promise that what they report as written survives a crash.
"""
from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path | str) -> None:
    """fsync a file or a folder by path (a folder: its entries, after a create, rename or unlink)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
