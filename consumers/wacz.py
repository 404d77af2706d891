"""A crawl's WARC files as one WACZ package (Web Archive Collection Zipped, version 1.1.1).

A WACZ is a ZIP that replay tools (ReplayWeb.page, pywb's WACZ loader) open as one collection:

- `archive/`: the WARC files, flat (their IIPC names are unique, decision 3834), stored uncompressed
  so a reader can fetch one record by byte range;
- `indexes/index.cdxj`: the crawl's merged index (`consumers.warc_index`, sorted, no tombstoned or
  torn lines) with each `filename` made the file's name inside `archive/`;
- `pages/pages.jsonl`: the HTML pages captured with status 200, one line per URL (its first capture);
- `datapackage.json`: each file's path, size and SHA-256; `datapackage-digest.json`: its own digest.

Packaging refuses a root whose tombstones are not yet compacted away: the WARC files would still
hold captures a takedown covers.
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Final

from consumers.roots import LocalRoot
from consumers.tombstones import WARC_FOLDER, load_tombstones, read_indexes
from consumers.warc_index import merged_index, record_refers_to

WACZ_VERSION: Final = "1.1.1"
PAGES_HEADER: Final = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
_CHUNK = 1 << 20


class NotPackable(ValueError):
    """The root cannot be packaged as it is; the message says why and what to run first."""


@dataclass(frozen=True)
class PackageCounts:
    warc_files: int
    index_lines: int
    pages: int
    bytes: int

    def as_dict(self) -> dict[str, int]:
        return {"warc_files": self.warc_files, "index_lines": self.index_lines, "pages": self.pages,
                "bytes": self.bytes}


def archive_index(index_text: str) -> str:
    """The merged index with each `filename` its WARC file's name in `archive/`, sorted again (C order)."""
    lines = []
    for line in index_text.splitlines():
        key, stamp, fields = line.split(" ", 2)
        entry = json.loads(fields)
        entry["filename"] = PurePosixPath(entry["filename"]).name
        lines.append(f"{key} {stamp} {json.dumps(entry, separators=(', ', ': '))}")
    return "".join(line + "\n" for line in sorted(lines, key=lambda line: line.encode("utf-8")))


def page_lines(index_text: str) -> list[str]:
    """pages.jsonl: its header, then each URL captured as an HTML page with status 200, at its first capture."""
    first: dict[str, str] = {}
    for line in index_text.splitlines():
        _key, stamp, fields = line.split(" ", 2)
        entry = json.loads(fields)
        if entry.get("status") != "200" or not str(entry.get("mime", "")).startswith("text/html"):
            continue
        url = entry["url"]
        if url not in first or stamp < first[url]:
            first[url] = stamp
    pages = [json.dumps(PAGES_HEADER)]
    pages += [json.dumps({"url": url, "ts": _iso(stamp)}) for url, stamp in sorted(first.items())]
    return pages


def datapackage(resources: Iterable[dict[str, Any]], created: datetime, software: str, title: str) -> dict[str, Any]:
    return {"profile": "data-package", "wacz_version": WACZ_VERSION, "title": title, "software": software,
            "created": created.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "resources": list(resources)}


def write_wacz(root: LocalRoot, out: Path, *, title: str, software: str,
               created: datetime | None = None) -> PackageCounts:
    """Package every WARC file under the local root `root` with its index and pages into `out`
    (written beside it first, then renamed). Raises NotPackable when tombstones wait for compaction."""
    waiting = sorted({t.warc for t in load_tombstones(root) if not t.compacted})
    if waiting:
        raise NotPackable(f"{len(waiting)} WARC file(s) still hold tombstoned captures (first: {waiting[0]}); "
                          f"run `crawler warc-compact` first")
    warcs = [name for name in root.list(WARC_FOLDER) if name.endswith(".warc.gz")]
    names = [PurePosixPath(name).name for name in warcs]
    if len(set(names)) != len(names):
        raise NotPackable("two WARC files share a name; archive/ in a WACZ is flat "
                          "(files an earlier release named by serial number collide)")
    merged, _counts = merged_index(read_indexes(root), set(), record_refers_to(root))
    index = archive_index(merged).encode("utf-8")
    listed = page_lines(merged)
    pages = "".join(line + "\n" for line in listed).encode("utf-8")
    partial = out.with_name(f".{out.name}.partial")
    resources = []
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as package:
        for relative, name in zip(warcs, names):
            resources.append(_store_file(package, root.path / relative, f"archive/{name}"))
        for path, data in (("indexes/index.cdxj", index), ("pages/pages.jsonl", pages)):
            resources.append(_store_bytes(package, path, data))
        described = json.dumps(datapackage(resources, created or datetime.now(timezone.utc), software, title),
                               indent=2).encode("utf-8")
        package.writestr(_info("datapackage.json"), described)
        digest = {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(described).hexdigest()}
        package.writestr(_info("datapackage-digest.json"), json.dumps(digest, indent=2).encode("utf-8"))
    size = partial.stat().st_size
    partial.replace(out)
    return PackageCounts(len(warcs), index.count(b"\n"), len(listed) - 1, size)


def _store_file(package: zipfile.ZipFile, source: Path, path: str) -> dict[str, Any]:
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as handle, package.open(_info(path), "w", force_zip64=True) as entry:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            entry.write(chunk)
            size += len(chunk)
    return {"name": PurePosixPath(path).name, "path": path, "hash": f"sha256:{digest.hexdigest()}", "bytes": size}


def _store_bytes(package: zipfile.ZipFile, path: str, data: bytes) -> dict[str, Any]:
    package.writestr(_info(path), data)
    return {"name": PurePosixPath(path).name, "path": path, "hash": "sha256:" + hashlib.sha256(data).hexdigest(),
            "bytes": len(data)}


def _info(path: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    return info


def _iso(stamp: str) -> str:
    """A 14-digit CDXJ timestamp as ISO 8601 UTC."""
    return f"{stamp[0:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[8:10]}:{stamp[10:12]}:{stamp[12:14]}Z"
