"""Uploads finished WARC files to S3-compatible object storage (ARCHITECTURE.md §3) through boto3.

`ObjectStore(policy, root)` is created inside a Flink function's `open()` (boto3 clients do not pickle).
An upload is whole-file (multipart above boto3's threshold) and is checked with a HEAD of the object:
only when the stored size matches the local file does `upload` return, so a caller may then treat the
file's records as durable (decision 0504).
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
    """An upload failed after boto3's retries, or the store holds something else under the key.

    It is not caught in the writer: the task fails, Flink restarts it from the last checkpoint, and the
    pages whose events were held are fetched again when their leases expire (decision 0504).
    """


class ObjectStore:
    """One bucket and prefix of an S3-compatible store, with the endpoint, credentials and encryption
    of a `StoragePolicy`."""

    def __init__(self, policy: StoragePolicy, root: S3Root) -> None:
        self.policy = policy
        self.root = root
        self._client = make_client(policy)

    def upload(self, local: Path, relative: str) -> str:
        """Put `local` at `relative` under the root; returns its `s3://` URL once the object is stored."""
        key = self.root.key(relative)
        try:
            self._client.upload_file(str(local), self.root.bucket, key, ExtraArgs=self.policy.upload_args() or None)
            stored = self._client.head_object(Bucket=self.root.bucket, Key=key)["ContentLength"]
        except (S3UploadFailedError, ClientError, BotoCoreError) as exc:
            raise UploadError(f"uploading {local} to s3://{self.root.bucket}/{key} failed: {exc}") from exc
        expected = local.stat().st_size
        if stored != expected:
            raise UploadError(f"s3://{self.root.bucket}/{key} holds {stored} bytes after uploading {expected}")
        return self.root.url(relative)

    def names(self, relative_folder: str) -> list[str]:
        """The object names (last path segment) directly under `relative_folder` of the root."""
        prefix = self.root.key(relative_folder.rstrip("/")) + "/"
        names = []
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.root.bucket, Prefix=prefix):
            names += [item["Key"][len(prefix):] for item in page.get("Contents", [])]
        return [name for name in names if "/" not in name]


def make_client(policy: StoragePolicy) -> Any:
    """A boto3 S3 client for the policy's endpoint, region, addressing style, credentials and retries."""
    kwargs: dict[str, Any] = {
        "config": Config(s3={"addressing_style": policy.addressing_style},
                         retries={"max_attempts": policy.max_attempts, "mode": "standard"}),
    }
    if policy.endpoint_url:
        kwargs["endpoint_url"] = policy.endpoint_url
    if policy.region:
        kwargs["region_name"] = policy.region
    if policy.access_key_id:
        kwargs["aws_access_key_id"] = policy.access_key_id
        kwargs["aws_secret_access_key"] = policy.secret_access_key
    return boto3.session.Session().client("s3", **kwargs)
