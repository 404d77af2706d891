"""Stored files under one root, on local disk or in S3, for the governance commands.

`open_root("out/warc", policy)` or `open_root("s3://bucket/prefix", policy)` gives the same small
interface: list names under a folder, read (whole or a byte range), write whole and delete. Names are relative to the root
with `/` separators (`crawl/2026-12-01/0/crawl-20261201080000000-00000-tm1~0.warc.gz`). Local writes are atomic (temporary file,
fsync, rename, folder fsync); S3 writes are one PutObject with the `[storage]` section's server-side
encryption (udfs.storage.StoragePolicy.upload_args, as the WARC uploads). The S3 client is the WARC
writer's (durable.object_store.make_client), so endpoint, credentials and retries are configured once.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from durable.files import fsync_path
from durable.object_store import make_client
from udfs.storage import S3Root, StoragePolicy, is_s3_root, parse_s3_root

# DeleteObjects takes at most this many keys per request (S3 API limit).
_DELETE_BATCH = 1000


class Root(Protocol):
    """Files under one root, by relative name."""

    def describe(self, name: str) -> str:
        """Where `name` is, for messages and logs (a path or an s3:// URL)."""

    def list(self, folder: str) -> list[str]:
        """Every name under `folder` ("" for the whole root, recursively), sorted; [] when there is none."""

    def read(self, name: str) -> bytes | None:
        """The content of `name`, or None when it does not exist."""

    def read_range(self, name: str, offset: int, length: int) -> bytes | None:
        """At most `length` bytes of `name` from `offset`, or None when it does not exist."""

    def write(self, name: str, data: bytes) -> None:
        """Store `data` as `name`, replacing it whole."""

    def delete(self, names: list[str]) -> None:
        """Delete `names` (missing ones are no error)."""


class LocalRoot:
    """A directory on local disk."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def describe(self, name: str) -> str:
        """The local path of `name`."""
        return str(self.path / name)

    def list(self, folder: str) -> list[str]:
        """Every file under `folder` ("" for the whole root), as names relative to the root (hidden
        temporary files left out)."""
        base = self.path / folder
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.path).as_posix() for p in base.rglob("*")
                      if p.is_file() and not p.name.startswith("."))

    def read(self, name: str) -> bytes | None:
        """The file's bytes, or None when it is missing."""
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None

    def read_range(self, name: str, offset: int, length: int) -> bytes | None:
        """At most `length` bytes of the file from `offset`, or None when it is missing."""
        try:
            with open(self.path / name, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except FileNotFoundError:
            return None

    def write(self, name: str, data: bytes) -> None:
        """Write atomically: a hidden temporary file, fsync, rename, folder fsync."""
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        fsync_path(target.parent)

    def delete(self, names: list[str]) -> None:
        """Unlink each file, then remove folders left empty (up to the root) and fsync their parents."""
        folders = set()
        for name in names:
            path = self.path / name
            path.unlink(missing_ok=True)
            folders.add(path.parent)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            while folder != self.path and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
            if folder.is_dir():
                fsync_path(folder)


class S3Objects:
    """A bucket and prefix of an S3-compatible store."""

    def __init__(self, root: S3Root, policy: StoragePolicy, client: Any = None) -> None:
        self.root = root
        self.policy = policy
        self._client = client if client is not None else make_client(policy)

    def describe(self, name: str) -> str:
        """The s3:// URL of `name`."""
        return self.root.url(name)

    def list(self, folder: str) -> list[str]:
        """Every object under `folder/` of the prefix, as names relative to the prefix."""
        folder = folder.strip("/")
        prefix = self.root.key(folder) + "/" if folder else self.root.key("")
        strip = len(self.root.key(""))
        names: list[str] = []
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.root.bucket, Prefix=prefix):
            names += [item["Key"][strip:].lstrip("/") for item in page.get("Contents", [])]
        return sorted(names)

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None when there is no such key."""
        try:
            answer = self._client.get_object(Bucket=self.root.bucket, Key=self.root.key(name))
        except self._client.exceptions.NoSuchKey:
            return None
        return bytes(answer["Body"].read())

    def read_range(self, name: str, offset: int, length: int) -> bytes | None:
        """At most `length` bytes of the object from `offset` (one ranged GetObject), or None when there
        is no such key."""
        try:
            answer = self._client.get_object(Bucket=self.root.bucket, Key=self.root.key(name),
                                             Range=f"bytes={offset}-{offset + max(length, 1) - 1}")
        except self._client.exceptions.NoSuchKey:
            return None
        return bytes(answer["Body"].read())

    def write(self, name: str, data: bytes) -> None:
        """One PutObject, with the configured server-side encryption."""
        self._client.put_object(Bucket=self.root.bucket, Key=self.root.key(name), Body=data,
                                **self.policy.upload_args())

    def delete(self, names: list[str]) -> None:
        """DeleteObjects in batches of 1,000; raises RuntimeError naming the first key S3 refused."""
        for start in range(0, len(names), _DELETE_BATCH):
            keys = [{"Key": self.root.key(name)} for name in names[start:start + _DELETE_BATCH]]
            answer = self._client.delete_objects(Bucket=self.root.bucket, Delete={"Objects": keys, "Quiet": True})
            errors = answer.get("Errors") or []
            if errors:
                raise RuntimeError(f"S3 refused to delete {errors[0].get('Key')}: {errors[0].get('Message')}")


def open_root(location: str, policy: StoragePolicy) -> Root:
    """A LocalRoot for a directory, S3Objects for `s3://bucket/prefix` (ValueError if malformed)."""
    if is_s3_root(location):
        return S3Objects(parse_s3_root(location), policy)
    return LocalRoot(location)
