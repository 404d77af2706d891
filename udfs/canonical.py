"""How much a page's rel=canonical is worth (decision 1804).

RFC 6596 makes `rel=canonical` a hint the publisher gives, and sites get it wrong often enough that a
crawler must not take it as a fact: every page of some sites names the home page, others name a URL
on another site, or one that does not exist. The verdict weighs it against what the crawler itself
saw of the page:

- `confirmed`: the canonical is the URL dedup found this page to duplicate (exactly or within the
  SimHash distance): the content agrees with the publisher.
- `hint`: on the same site (registrable domain) and not a home page standing in for an inner page:
  plausible, not verified.
- `ignored`: on another site, or the site's home page named by an inner page (the "home page for
  everything" mistake); the reason says which.

A page naming itself, or naming nothing, has no verdict. A canonical that turns out broken (404, 410,
a soft 404) is seen by its own fetch: the writer sends a `hint` to the frontier like a link, naming the
page (`UrlEntry.canonical_of`), and the frontier revises that page's verdict to `ignored` on
crawl.status (`revision`, decision 1820).

Pure: strings in, a verdict out.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from udfs.records import SCHEMA_VERSION, CanonicalRevised
from udfs.urls import registrable_domain, url_fp

CONFIRMED, HINT, IGNORED = "confirmed", "hint", "ignored"


@dataclass(frozen=True)
class CanonicalVerdict:
    url: str
    trust: str      # CONFIRMED, HINT or IGNORED
    reason: str     # why, in a few words

    def as_record(self) -> dict[str, str]:
        """The `canonical` object of a pages.parsed record."""
        return {"url": self.url, "trust": self.trust, "reason": self.reason}


def _is_home(url: str) -> bool:
    parts = urlsplit(url)
    return parts.path in ("", "/") and not parts.query


def judge_canonical(page_url: str, canonical: str | None, duplicate_of: str | None = None,
                    near_duplicate_of: str | None = None) -> CanonicalVerdict | None:
    """The verdict on the canonical `page_url` declares (both normalised URLs), given what dedup found
    it to duplicate; None when it declares none or itself. Never raises on a malformed URL: a
    canonical whose host cannot be read is ignored."""
    if not canonical or canonical == page_url:
        return None
    if canonical in (duplicate_of, near_duplicate_of):
        return CanonicalVerdict(canonical, CONFIRMED, "the page duplicates it")
    try:
        page_host, canonical_host = urlsplit(page_url).hostname, urlsplit(canonical).hostname
    except ValueError:
        return CanonicalVerdict(canonical, IGNORED, "unreadable URL")
    if not page_host or not canonical_host:
        return CanonicalVerdict(canonical, IGNORED, "unreadable URL")
    if registrable_domain(page_host) != registrable_domain(canonical_host):
        return CanonicalVerdict(canonical, IGNORED, "another site")
    if _is_home(canonical) and not _is_home(page_url):
        return CanonicalVerdict(canonical, IGNORED, "the home page for an inner page")
    return CanonicalVerdict(canonical, HINT, "same site, not verified")


def revision(page_url: str, canonical: str, reason: str) -> tuple[str, CanonicalRevised]:
    """The crawl.status record that revises the `hint` verdict of the page `page_url` to `ignored`: its
    canonical was found broken for `reason`; keyed like the page's pages.parsed record
    (its url_fp as decimal text)."""
    return str(url_fp(page_url)), CanonicalRevised(v=SCHEMA_VERSION, type="canonical_revised", url=page_url,
                                                   canonical=canonical, trust=IGNORED, reason=reason)
