"""Soft-404 detection: a host's 200 pages against its answer for a path that cannot exist (decision 1802).

Once per host the frontier fetches a probe (`probe_url`): a random path shaped like a real page,
`/<word>-<hex>.html`, fetched politely like any page. Its answer becomes a `ProbeRow`: the status,
the SimHash of its text, its length and its title. A probe answered 404 or 410 shows an honest host:
its 200s are real and nothing is checked. A probe answered 200 is the host's "not found" page, and
`is_soft_404` compares each later 200 page of the host with it: the same content within the SimHash
distance (Manku et al. 2007, k = 3), or the same title, at a similar length, is a soft 404.
Any other probe answer (redirect, 5xx, timeout) is inconclusive: nothing is checked, and the probe
is repeated after `retry_after_s` (`probe_due`).

Bar-Yossef et al., "Sic Transit Gloria Telae" (WWW 2004) introduced the random-path probe. The title
rule exists because an error page that echoes the requested path changes a large share of a short
page's words: on the synthetic web's soft-404 pages the SimHash distance between two such answers
reached 27 bits, far past k = 3, while their titles were identical.

Rows are plain JSON text with a schema version. Randomness and time are injected.
"""
from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from udfs.simhash import hamming

__all__ = [
    "DEFAULT_SOFT404_POLICY",
    "PROBE_ROW_VERSION",
    "PROBE_PATH",
    "PROBE_WORDS",
    "ProbeRow",
    "Soft404Policy",
    "is_honest",
    "is_suspect",
    "no_answer",
    "is_soft_404",
    "normalize_title",
    "probe_due",
    "probe_url",
]

PROBE_ROW_VERSION = 1
# Words that name ordinary pages on many sites, so the probe path looks like a page a site might have.
PROBE_WORDS: tuple[str, ...] = (
    "about", "archive", "article", "blog", "catalog", "contact", "events", "faq", "features", "gallery",
    "guide", "help", "history", "index", "info", "library", "news", "notes", "overview", "page", "press",
    "products", "projects", "resources", "reviews", "services", "story", "support", "team", "updates",
)
# The path of every probe_url: one of the words, a dash, 16 hex digits, ".html".
PROBE_PATH = re.compile(r"^/(?:" + "|".join(PROBE_WORDS) + r")-[0-9a-f]{16}\.html$")
_HONEST_STATUSES = frozenset({404, 410})
_SPACE = re.compile(r"\s+")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Soft404Policy:
    """Soft-404 detection (config section `[soft404]`); defaults documented here.

    enabled: probe each host once (robots.txt and tdmrep.json first) and check its 200 pages against
        the answer (True; decision 1844).
    max_hamming: a 200 page whose SimHash is within this many bits of the probe's is the error page
        (3: the near-duplicate distance of Manku et al. 2007, also `dedup`'s).
    use_title: also call a page a soft 404 when its title equals the probe's (True).
    min_length_ratio: both rules also need shorter length / longer length at least this (0.8); the
        synthetic web's error pages, echoing paths of 2 to 45 characters, stay above 0.85.
    reprobe_after_s: a conclusive probe is repeated after this, as sites change (30 days).
    retry_after_s: an inconclusive probe (redirect, 5xx, timeout, network error) is repeated after this (1 day).
    preflight_answers: a tdmrep.json the host itself answers 404 or 410 (no redirect) is a missing path
        answered honestly, so it stands in for a probe that is due, unless the last probe was answered
        200 (True; decision 1821). False: every host gets its own probe request.
    """

    enabled: bool = True
    max_hamming: int = 3
    use_title: bool = True
    min_length_ratio: float = 0.8
    reprobe_after_s: float = 30 * 86_400.0
    retry_after_s: float = 86_400.0
    preflight_answers: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_hamming, bool) or not isinstance(self.max_hamming, int) \
                or not 0 <= self.max_hamming <= 64:
            raise ValueError(f"soft404.max_hamming must be an integer within [0, 64], got {self.max_hamming!r}")
        for name in ("enabled", "use_title", "preflight_answers"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"soft404.{name} must be true or false, got {getattr(self, name)!r}")
        if not _finite(self.min_length_ratio) or not 0 <= self.min_length_ratio <= 1:
            raise ValueError(f"soft404.min_length_ratio must be within [0, 1], got {self.min_length_ratio!r}")
        for name in ("reprobe_after_s", "retry_after_s"):
            value = getattr(self, name)
            if not _finite(value) or value <= 0:
                raise ValueError(f"soft404.{name} must be a finite number > 0, got {value!r}")


DEFAULT_SOFT404_POLICY = Soft404Policy()


def probe_url(host: str, rng: random.Random, scheme: str = "http") -> str:
    """A URL on `host` that should not exist but looks like a page: `/<word>-<16 hex>.html`.

    `host` is the frontier's host key (name, with a port when it has one); `rng` is injected so
    tests and replays are deterministic. 64 random bits make a collision with a real page negligible.
    """
    word = PROBE_WORDS[rng.randrange(len(PROBE_WORDS))]
    return f"{scheme}://{host}/{word}-{rng.getrandbits(64):016x}.html"


def normalize_title(title: Any) -> str:
    """A title as compared: whitespace collapsed, case folded; "" for no title or a non-string."""
    if not isinstance(title, str):
        return ""
    return _SPACE.sub(" ", title).strip().casefold()


@dataclass(frozen=True)
class ProbeRow:
    """A host's probe answer.

    status: the HTTP status, or None when no response came (timeout, network error).
    simhash: the SimHash of the answer's text (200 answers; None otherwise).
    length: the answer's body length in bytes (the completion's `bytes`).
    title: the answer's normalised title ("" when none).
    at: when the answer came, epoch seconds.
    """

    status: int | None
    simhash: int | None
    length: int
    title: str
    at: float

    @staticmethod
    def of(status: Any, simhash: Any, length: Any, title: Any, at: float) -> ProbeRow:
        """The row of one probe completion, from event fields as they come (never raises on hostile values):
        a non-integer status reads as None, a SimHash outside 64 bits as None, a bad length as 0."""
        good_status = isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 999
        good_hash = isinstance(simhash, int) and not isinstance(simhash, bool) and 0 <= simhash < (1 << 64)
        good_length = isinstance(length, int) and not isinstance(length, bool) and length >= 0
        return ProbeRow(status if good_status else None, simhash if good_hash else None,
                        length if good_length else 0, normalize_title(title), at)

    def to_row(self) -> str:
        """The row as compact JSON text with its schema version."""
        return json.dumps({"v": PROBE_ROW_VERSION, "status": self.status, "simhash": self.simhash,
                           "length": self.length, "title": self.title, "at": self.at}, separators=(",", ":"))

    @staticmethod
    def from_row(row: str) -> ProbeRow:
        """The row from state. Raises ValueError on a foreign schema version or a malformed row."""
        try:
            data = json.loads(row)
            if not isinstance(data, dict) or data.get("v") != PROBE_ROW_VERSION:
                version = data.get("v") if isinstance(data, dict) else None
                raise ValueError(f"probe row schema version {version!r}; this release reads {PROBE_ROW_VERSION}")
            fields = (data["status"], data["simhash"], data["length"], data["title"], data["at"])
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed probe row: {exc}") from None
        parsed = ProbeRow.of(*fields)
        if (parsed.status, parsed.simhash, parsed.length, parsed.title) != fields[:4] or not _finite(fields[4]):
            raise ValueError(f"malformed probe row: {row!r}")
        return parsed


def no_answer(at: float) -> ProbeRow:
    """The row of a probe that got no response (a lease expiry, or robots.txt keeps us off the path):
    inconclusive, so it is tried again after `retry_after_s`."""
    return ProbeRow(None, None, 0, "", at)


def is_suspect(probe: ProbeRow | None) -> bool:
    """The probe was answered 200 with a SimHash: the host serves missing paths as pages, so each of
    its 200 pages is checked against the answer (`is_soft_404`)."""
    return probe is not None and probe.status == 200 and probe.simhash is not None


def is_honest(probe: ProbeRow | None) -> bool:
    """The probe was answered 404 or 410: the host reports missing pages, so its 200s are trusted."""
    return probe is not None and probe.status in _HONEST_STATUSES


def preflight_answer(probe: ProbeRow | None, status: Any, redirected: Any, now: float,
                     policy: Soft404Policy = DEFAULT_SOFT404_POLICY) -> ProbeRow | None:
    """The probe answer a host's own 404 or 410 to `/.well-known/tdmrep.json` gives, or None.

    Most hosts have no tdmrep.json, and the crawler asks for it before the probe: a host that answers
    it 404 or 410 itself (no redirect) reports missing paths, which is all an honest probe answer says.
    (robots.txt does not count: servers often answer it apart from the rest, from disk or a dedicated
    route, in front of an application that answers every other path with a page.) It stands in only
    for a probe that is due, and never for one answered 200: a host once found serving its missing
    pages as pages keeps its own probe.
    """
    honest = type(status) is int and status in _HONEST_STATUSES
    if not policy.preflight_answers or not honest or redirected is True:
        return None
    if is_suspect(probe) or not probe_due(probe, now, policy):
        return None
    return ProbeRow(status, None, 0, "", now)


def probe_due(probe: ProbeRow | None, now: float, policy: Soft404Policy = DEFAULT_SOFT404_POLICY) -> bool:
    """Whether the host should be probed (again) at `now`.

    Never probed: due. A conclusive answer (404, 410 or 200 with a SimHash) is repeated after
    `reprobe_after_s`; anything else after `retry_after_s`. A clock before the answer: not due.
    """
    if probe is None:
        return True
    conclusive = is_honest(probe) or is_suspect(probe)
    wait = policy.reprobe_after_s if conclusive else policy.retry_after_s
    return now - probe.at >= wait


def is_soft_404(probe: ProbeRow | None, http_status: Any, simhash: Any, length: Any, title: Any = None,
                policy: Soft404Policy = DEFAULT_SOFT404_POLICY) -> bool:
    """Whether a page is the host's "not found" page served with 200 (soft-404).

    Only a 200 page of a host whose probe was answered 200 is checked; an honest probe (404/410) or
    an inconclusive one means no. A page is a soft 404 when its length is within `min_length_ratio`
    of the probe's and its SimHash is within `max_hamming` bits of the probe's, or (with `use_title`)
    its non-empty title equals the probe's. Never raises: malformed values mean "not a soft 404".
    """
    if not is_suspect(probe) or http_status != 200:
        return False
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        return False
    longer = max(length, probe.length)
    if longer == 0:
        return False  # two empty bodies say nothing about each other
    if min(length, probe.length) / longer < policy.min_length_ratio:
        return False
    if isinstance(simhash, int) and not isinstance(simhash, bool) and 0 <= simhash < (1 << 64) \
            and hamming(simhash, probe.simhash) <= policy.max_hamming:
        return True
    if not policy.use_title:
        return False
    page_title = normalize_title(title)
    return bool(page_title) and page_title == probe.title
