"""Where the synthetic web finds the real pages and robots.txt files it is made of.

The pages belong to their publishers, so they are not shipped in the package: the synthetic web reads
them from a webdata folder (see README.md beside this module), found in this order:
`CRAWLER_WEBDATA_DIR`, then `$CRAWLER_SHARED_DIR/webdata`, then `../shared/webdata` beside a checkout.
"""
from __future__ import annotations

import os
from pathlib import Path

WEBDATA_ENV = "CRAWLER_WEBDATA_DIR"
SHARED_ENV = "CRAWLER_SHARED_DIR"
PAGE_DIRS = ("trafilatura_eval", "scrapinghub_aeb")  # the page folders the corpus reads, each with a manifest
CHECKOUT = Path(__file__).resolve().parents[1]


def webdata_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """The webdata folder this process reads, by the order in the module's docstring."""
    if environ.get(WEBDATA_ENV):
        return Path(environ[WEBDATA_ENV]).resolve()
    if environ.get(SHARED_ENV):
        return (Path(environ[SHARED_ENV]) / "webdata").resolve()
    return (CHECKOUT.parent / "shared" / "webdata").resolve()


class WebdataMissing(FileNotFoundError):
    """No webdata folder where this process looked; the message says where and how to point at one."""

    def __init__(self, looked_in: Path) -> None:
        super().__init__(
            f"the synthetic web is made of real pages that are not shipped with the package; none found in "
            f"{looked_in}. Set {WEBDATA_ENV} to a webdata folder (with trafilatura_eval/, scrapinghub_aeb/ and "
            f"robots_txt_protego/), or {SHARED_ENV} to the folder that holds webdata/.")


def require_webdata(folder: Path) -> Path:
    """`folder`, if it holds the page manifests the corpus reads; else `WebdataMissing`."""
    if not all((folder / d / "manifest.jsonl").is_file() for d in PAGE_DIRS):
        raise WebdataMissing(folder)
    return folder
