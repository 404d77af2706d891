"""Uploads finished WARC files to S3-compatible object storage (docs/architecture.md §3) through boto3.

`ObjectStore(policy, root)` is created inside a Flink function's `open()` (boto3 clients do not pickle).
An upload is whole-file (multipart above boto3's threshold) and is checked with a HEAD of the object:
only when the stored size matches the local file does `upload` return, so a caller may then treat the
file's records as durable (decision 0504). Every failure is an `UploadError`; the writer keeps the file
staged and tries again later (decision 3782).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from udfs.storage import S3Root, StoragePolicy


class UploadError(RuntimeError):
    """A request to the store failed (after boto3's retries, if any), or the store holds something else
    under the key. The WARC writer catches it: the file stays staged and is tried again after a backoff;
    nothing is published from it until then."""


class ObjectStore:
    """One bucket and prefix of an S3-compatible store, with the endpoint, credentials, encryption and
    timeouts of a `StoragePolicy`."""

    def __init__(self, policy: StoragePolicy, root: S3Root) -> None:
        self.policy = policy
        self.root = root
        self._client = make_client(policy)
        self._single = make_client(policy, attempts=1)

    def upload(self, local: Path, relative: str, retry: bool = True) -> str:
        """Put `local` at `relative` under the root; returns its `s3://` URL once the object is stored.
        With `retry=False` each request is tried once (the caller backs off on its own)."""
        client = self._client if retry else self._single
        key = self.root.key(relative)
        try:
            client.upload_file(str(local), self.root.bucket, key, ExtraArgs=self.policy.upload_args() or None)
            stored = client.head_object(Bucket=self.root.bucket, Key=key)["ContentLength"]
        except (S3UploadFailedError, ClientError, BotoCoreError) as exc:
            raise UploadError(f"uploading {local} to s3://{self.root.bucket}/{key} failed: {exc}") from exc
        expected = local.stat().st_size
        if stored != expected:
            raise UploadError(f"s3://{self.root.bucket}/{key} holds {stored} bytes after uploading {expected}")
        return self.root.url(relative)

    def size(self, relative: str, retry: bool = True) -> int | None:
        """The stored size of `relative`, or None if there is no such object."""
        client = self._client if retry else self._single
        key = self.root.key(relative)
        try:
            return int(client.head_object(Bucket=self.root.bucket, Key=key)["ContentLength"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise UploadError(f"HEAD s3://{self.root.bucket}/{key} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise UploadError(f"HEAD s3://{self.root.bucket}/{key} failed: {exc}") from exc

    def read(self, relative: str, offset: int, length: int, retry: bool = True) -> bytes:
        """`length` bytes of `relative` from `offset` (fewer if the object is shorter)."""
        client = self._client if retry else self._single
        key = self.root.key(relative)
        try:
            answer = client.get_object(Bucket=self.root.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
            return answer["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise UploadError(f"GET s3://{self.root.bucket}/{key} failed: {exc}") from exc

    def names(self, relative_folder: str, retry: bool = True) -> list[str]:
        """The object names (last path segment) directly under `relative_folder` of the root."""
        client = self._client if retry else self._single
        prefix = self.root.key(relative_folder.rstrip("/")) + "/"
        names = []
        try:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.root.bucket, Prefix=prefix):
                names += [item["Key"][len(prefix):] for item in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            raise UploadError(f"listing s3://{self.root.bucket}/{prefix} failed: {exc}") from exc
        return [name for name in names if "/" not in name]


def make_client(policy: StoragePolicy, attempts: int | None = None) -> Any:
    """A boto3 S3 client for the policy's endpoint, region, addressing style, credentials, timeouts and
    retries (`attempts` overrides the policy's max_attempts)."""
    kwargs: dict[str, Any] = {
        "config": Config(s3={"addressing_style": policy.addressing_style},
                         connect_timeout=policy.timeout_s, read_timeout=policy.timeout_s,
                         retries={"max_attempts": attempts or policy.max_attempts, "mode": "standard"}),
    }
    if policy.endpoint_url:
        kwargs["endpoint_url"] = policy.endpoint_url
    if policy.region:
        kwargs["region_name"] = policy.region
    if policy.access_key_id:
        kwargs["aws_access_key_id"] = policy.access_key_id
        kwargs["aws_secret_access_key"] = policy.secret_access_key
    return boto3.session.Session().client("s3", **kwargs)
