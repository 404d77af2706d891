"""Where WARC files are kept: the `[storage]` section for S3-compatible object storage, and the parsing
of `s3://bucket/prefix` roots (docs/architecture.md §3: files on local disk by default, or S3 via boto3).

Pure: the uploader that uses these values is `durable/object_store.py`.
"""
from __future__ import annotations

import dataclasses
import math
import re

from udfs.numbers import doubled_wait

S3_SCHEME = "s3://"
# S3 bucket naming rules (lower-case letters, digits, dots, hyphens; 3-63 characters; starts and ends
# with a letter or digit). Checked up front so a typo fails at start-up, not at the first roll.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SSE_MODES = frozenset({"", "AES256", "aws:kms", "aws:kms:dsse"})
_ADDRESSING = frozenset({"auto", "path", "virtual"})


@dataclasses.dataclass(frozen=True)
class S3Root:
    """A parsed `s3://bucket/prefix` WARC root; `prefix` has no leading or trailing slash (may be "")."""

    bucket: str
    prefix: str

    def key(self, relative: str) -> str:
        """The object key of `relative` (e.g. `crawl/2026-11-30/0/crawl-20261130120000000-00000-tm1~0.warc.gz`) under the prefix."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def url(self, relative: str) -> str:
        """The `s3://bucket/key` URL of `relative`, as published in ParsedPage.warc_path."""
        return f"{S3_SCHEME}{self.bucket}/{self.key(relative)}"

    def relative_of(self, url: str) -> str | None:
        """The relative path `url` names under this root (the inverse of `url`); None if it is not under it."""
        base = self.url("")
        return url[len(base):] if url.startswith(base) and len(url) > len(base) else None


def is_s3_root(root: str) -> bool:
    """Whether a WARC root names object storage (`s3://...`) rather than a local directory (§3)."""
    return root.startswith(S3_SCHEME)


def parse_s3_root(root: str) -> S3Root:
    """`s3://bucket[/prefix]` → S3Root (docs/architecture.md §3); raises ValueError saying what is wrong."""
    if not is_s3_root(root):
        raise ValueError(f"{root!r} is not an s3:// URL")
    bucket, _, prefix = root[len(S3_SCHEME):].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ValueError(f"{root!r}: {bucket!r} is not a valid S3 bucket name (3-63 of a-z 0-9 . -)")
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"{root!r}: the prefix must not contain empty, '.' or '..' segments")
    return S3Root(bucket, prefix)


@dataclasses.dataclass(frozen=True)
class StoragePolicy:
    """The `[storage]` section: how WARC files reach an `s3://` `job.warc_root` (unused for a local root).

    Files are written whole to `staging_dir`, uploaded on roll, and only then are their pages published
    (decision 0504), so the roll limits here also bound how long page events are held back. An upload
    that fails is tried again with a bounded exponential backoff; the file stays staged meanwhile.
    """

    # S3 API endpoint, e.g. "http://127.0.0.1:9000" for S3Proxy/MinIO; "" = AWS's endpoint for the region.
    endpoint_url: str = ""
    # Signing region; "" = boto3's own lookup (AWS_REGION, ~/.aws/config).
    region: str = ""
    # "path" (bucket in the URL path, what most S3-compatible servers want), "virtual" or "auto".
    addressing_style: str = "auto"
    # Static credentials; both "" = boto3's default chain (env, shared files, instance or pod role),
    # which keeps secrets out of config files and should be preferred outside tests.
    access_key_id: str = ""
    secret_access_key: str = ""
    # Server-side encryption of uploaded files: "" (bucket default), "AES256", "aws:kms", "aws:kms:dsse".
    server_side_encryption: str = ""
    # KMS key for "aws:kms"/"aws:kms:dsse"; "" = the account's default S3 key.
    sse_kms_key_id: str = ""
    # Attempts per S3 request (botocore "standard" retries, with backoff) while the store answers; once an
    # upload has failed, each later try is a single attempt, spaced by upload_retry_initial_s/max_s.
    max_attempts: int = 5
    # Connect and read timeout of one S3 request, seconds (botocore's own is 60): a store that hangs
    # holds the writer at most this long per attempt.
    timeout_s: float = 20.0
    # After a failed upload the file stays staged, the job keeps running, and the writer tries again
    # this long later, doubling per failure in a row up to upload_retry_max_s (decision 3782).
    upload_retry_initial_s: float = 1.0
    upload_retry_max_s: float = 60.0
    # Local directory where files are written before upload; each subtask uses its own subfolder.
    # A staged file is deleted only once it is in the store.
    staging_dir: str = "out/warc-staging"
    # Roll (and upload) a staged file at this size, bytes: bounds the page events held back.
    max_file_bytes: int = 64 * 1024 * 1024
    # ... or at this age, seconds. Keep it well under frontier.lease_timeout_s minus the fetch timeout,
    # or held completions arrive after their lease expired and the URL is fetched again.
    max_file_age_s: float = 10.0

    def __post_init__(self) -> None:
        if self.endpoint_url and not re.match(r"^https?://[^/\s]+/?$", self.endpoint_url):
            raise ValueError(f"endpoint_url must be http(s)://host[:port], got {self.endpoint_url!r}")
        if self.addressing_style not in _ADDRESSING:
            raise ValueError(f"addressing_style must be one of {sorted(_ADDRESSING)}, got {self.addressing_style!r}")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ValueError("access_key_id and secret_access_key must be set together (or both left empty)")
        if self.server_side_encryption not in _SSE_MODES:
            raise ValueError(f"server_side_encryption must be one of {sorted(_SSE_MODES)}, "
                             f"got {self.server_side_encryption!r}")
        if self.sse_kms_key_id and not self.server_side_encryption.startswith("aws:kms"):
            raise ValueError("sse_kms_key_id needs server_side_encryption = \"aws:kms\" or \"aws:kms:dsse\"")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        for name in ("timeout_s", "upload_retry_initial_s", "upload_retry_max_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"storage.{name} must be a finite number of seconds > 0, got {value!r}")
        if self.upload_retry_max_s < self.upload_retry_initial_s:
            raise ValueError(f"storage.upload_retry_max_s ({self.upload_retry_max_s!r}) must be at least "
                             f"storage.upload_retry_initial_s ({self.upload_retry_initial_s!r})")
        if not self.staging_dir:
            raise ValueError("staging_dir must name a local directory")
        if self.max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be at least 1, got {self.max_file_bytes}")
        if not self.max_file_age_s > 0:
            raise ValueError(f"max_file_age_s must be positive, got {self.max_file_age_s}")

    def upload_retry_s(self, failures: int) -> float:
        """How long to wait before the next upload try after `failures` failed tries in a row (>= 1):
        upload_retry_initial_s doubled per further failure, at most upload_retry_max_s."""
        if failures < 1:
            return 0.0
        return doubled_wait(self.upload_retry_initial_s, failures, self.upload_retry_max_s)

    def upload_args(self) -> dict[str, str]:
        """Extra PutObject arguments for the configured server-side encryption (none by default)."""
        args: dict[str, str] = {}
        if self.server_side_encryption:
            args["ServerSideEncryption"] = self.server_side_encryption
        if self.sse_kms_key_id:
            args["SSEKMSKeyId"] = self.sse_kms_key_id
        return args
