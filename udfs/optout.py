"""Whether a page's site reserves text-and-data mining (TDM), and why.

Pure: every input is a plain value the crawl already has ("opt-out filter"): response
headers, the page's `<meta name=... content=...>` pairs, the host's robots.txt body (or the AI agents
the frontier found it disallows for the URL: `ai_disallowed`) and its `/.well-known/tdmrep.json` body
(or the value of its rule for the URL, which the frontier puts on the fetch request: decision 1930).
Nothing here fetches, and nothing raises on hostile input.

Signals, each giving a reason string (decision 1202):
- robots.txt: a configured AI user agent (GPTBot, CCBot, ...) may not fetch the page under RFC 9309
  matching (`udfs.robots`: its own groups, else the `*` groups)   → `robots.txt disallows GPTBot`;
- `X-Robots-Tag` header and `<meta name="robots">` (or `<meta name="<ai agent>">`) carrying one of
  the configured directives (`noai`, `noimageai`)                  → `x-robots-tag: noai`, `meta robots: noai`;
- W3C TDM Reservation Protocol (TDMRep, Final CG Report 2024): `tdm-reservation` from
  `/.well-known/tdmrep.json` (the first rule whose `location` matches the path, robots.txt-style
  patterns), superseded by the HTTP header, superseded by `<meta name="tdm-reservation">`
  (TDMRep §"Processing priority"); the final value 1 reserves  → `tdmrep header: tdm-reservation=1`.
Any one signal reserves the page; all of them are reported.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Protocol

from udfs.robots import parse_robots, url_match_path

# Agents whose robots.txt groups express an AI-training (TDM) reservation.
DEFAULT_AI_AGENTS: Final = ("GPTBot", "CCBot", "Google-Extended", "anthropic-ai", "ClaudeBot")
DEFAULT_DIRECTIVES: Final = ("noai", "noimageai")
_KIB: Final = 1024
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]+")
# An escaped unreserved octet (RFC 3986 §2.3): TDMRep says to decode these before comparing.
_ESCAPED_UNRESERVED: Final = re.compile(r"%(?:3[0-9]|4[1-9A-Fa-f]|5[0-9Aa]|6[1-9A-Fa-f]|7[0-9Aa]|2[DEde]|5[Ff]|7[Ee])")
_OTHER_ESCAPE: Final = re.compile(r"%[0-9A-Fa-f]{2}")


@dataclass(frozen=True)
class OptOutPolicy:
    """Which signals count as a TDM reservation (section `[optout]`).

    ai_agents: product tokens whose robots.txt verdict for the page is a reservation (GPTBot, CCBot,
        Google-Extended, anthropic-ai, ClaudeBot); each a non-empty `[A-Za-z0-9_-]` token.
    directives: X-Robots-Tag / meta robots values that reserve the page ("noai", "noimageai"; the
        second speaks of images, and is honoured for the whole page).
    use_robots / use_directives / use_tdmrep: switch a family of signals off (all True).
    fetch_tdmrep: the crawl job fetches each host's `/.well-known/tdmrep.json` once per robots.txt TTL
        (True); it never does when `use_tdmrep` is false (`tdmrep_fetched`).
    max_tdmrep_bytes: bytes of a tdmrep.json parsed (64 KiB; a longer file is cut, and the cut
        JSON does not parse, so the file is ignored and its host counted as not declaring).
    max_tdmrep_rules: rules of a tdmrep.json read, first ones first (1,000).
    """

    ai_agents: tuple[str, ...] = DEFAULT_AI_AGENTS
    directives: tuple[str, ...] = DEFAULT_DIRECTIVES
    use_robots: bool = True
    use_directives: bool = True
    use_tdmrep: bool = True
    fetch_tdmrep: bool = True
    max_tdmrep_bytes: int = 64 * _KIB
    max_tdmrep_rules: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.ai_agents, tuple) or not all(
                isinstance(a, str) and _TOKEN.fullmatch(a) for a in self.ai_agents):
            raise ValueError(f"ai_agents must be a tuple of product tokens ([A-Za-z0-9_-]+), got {self.ai_agents!r}")
        if not isinstance(self.directives, tuple) or not all(
                isinstance(d, str) and _TOKEN.fullmatch(d) for d in self.directives):
            raise ValueError(f"directives must be a tuple of directive names ([A-Za-z0-9_-]+), got {self.directives!r}")
        for name in ("use_robots", "use_directives", "use_tdmrep", "fetch_tdmrep"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.max_tdmrep_bytes, int) or self.max_tdmrep_bytes < 1024:
            raise ValueError(f"max_tdmrep_bytes must be an integer of at least 1024, got {self.max_tdmrep_bytes!r}")
        if not isinstance(self.max_tdmrep_rules, int) or self.max_tdmrep_rules < 1:
            raise ValueError(f"max_tdmrep_rules must be a positive integer, got {self.max_tdmrep_rules!r}")


    @property
    def tdmrep_fetched(self) -> bool:
        """Whether the crawl job fetches tdmrep.json: `fetch_tdmrep` and `use_tdmrep`."""
        return self.fetch_tdmrep and self.use_tdmrep


DEFAULT_OPTOUT_POLICY: Final = OptOutPolicy()


@dataclass(frozen=True)
class OptOut:
    """The verdict: reserved or not, and every signal that reserved it (empty when not reserved)."""

    reserved: bool
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        """All reasons in one line ("" when not reserved)."""
        return "; ".join(self.reasons)

    def as_record(self) -> dict[str, Any]:
        """The `optout` field of a pages.parsed record: {"reserved": bool, "reason": str} (decision 1203)."""
        return {"reserved": self.reserved, "reason": self.reason}


Headers = Iterable[tuple[str, str]] | Mapping[str, str]
# The `<meta name>` values (lower case) the decision reads besides the configured AI agents' names.
META_NAMES: Final = ("robots", "tdm-reservation", "tdm-policy")


class AgentRules(Protocol):
    """What `ai_disallowed` needs from parsed robots.txt rules (udfs.robots.RobotsRules)."""

    def allowed(self, url: str, user_agent: str) -> bool: ...


@lru_cache(maxsize=16)
def meta_names(policy: OptOutPolicy = DEFAULT_OPTOUT_POLICY) -> frozenset[str]:
    """The lower-cased `<meta name>` values `decide` reads: robots, tdm-reservation, tdm-policy and each
    configured AI agent; what the parse step keeps of a page's meta tags."""
    return frozenset(META_NAMES) | {agent.lower() for agent in policy.ai_agents}


def ai_disallowed(rules: AgentRules, url: str, agents: Iterable[str]) -> tuple[str, ...]:
    """The agents, in the given order, that robots.txt `rules` do not allow to fetch `url` (RFC 9309 §2.2).
    Fails closed: rules that raise for an agent count as disallowing it. Never raises."""
    blocked: list[str] = []
    for agent in agents:
        try:
            allowed = bool(rules.allowed(url, agent))
        except Exception:  # noqa: BLE001 - a broken rules object must not let the page through as unreserved
            allowed = False
        if not allowed:
            blocked.append(agent)
    return tuple(blocked)


def decide(url: str, *, headers: Headers = (), meta: Headers | None = None,
           robots_body: bytes | None = None, tdmrep_body: bytes | None = None,
           robots_disallowed: Iterable[str] = (), tdmrep_file_value: int | None = None,
           policy: OptOutPolicy = DEFAULT_OPTOUT_POLICY) -> OptOut:
    """Whether the site of `url` reserves TDM for it, with every reason (TDMRep; RFC 9309).

    `headers` are the response headers as received (pairs or a mapping); `meta` the page's
    `<meta name>` / `content` pairs (a mapping or pairs, names in any case); `robots_body` /
    `tdmrep_body` are the host's files (None: not known or not there). `robots_disallowed` names the
    AI agents robots.txt disallows for `url` when the caller already judged it (the crawl job's
    frontier, which holds the parsed rules: `ai_disallowed`); it gives the same reasons as
    `robots_body` would, and both may be given. `tdmrep_file_value` is the `tdm-reservation` (0 or 1)
    of the host's tdmrep.json rule matching `url` when the caller already judged it (the frontier:
    `FetchRequest.tdm_file`); it stands in for `tdmrep_body` at the same priority (file, then header,
    then meta), and wins over it when both are given. Never raises: unreadable inputs count as no signal.
    """
    pairs = _pairs(headers)
    meta_pairs = _pairs(meta or {})
    reasons: list[str] = []
    if policy.use_robots:
        if robots_body is not None:
            reasons += robots_reasons(url, robots_body, policy.ai_agents)
        reasons += _agent_reasons(robots_disallowed)
        reasons = list(dict.fromkeys(reasons))
    if policy.use_directives:
        reasons += directive_reasons(pairs, meta_pairs, policy)
    if policy.use_tdmrep:
        reasons += tdmrep_reasons(url, pairs, meta_pairs, tdmrep_body, policy, tdmrep_file_value)
    return OptOut(bool(reasons), tuple(reasons))


def robots_reasons(url: str, robots_body: bytes, agents: Iterable[str]) -> list[str]:
    """One reason per AI agent that robots.txt does not allow to fetch `url` (RFC 9309 §2.2). Never raises."""
    try:
        rules = parse_robots(bytes(robots_body))
    except Exception:  # noqa: BLE001 - parse_robots never raises; a non-bytes body is "no signal"
        return []
    return _agent_reasons(ai_disallowed(rules, url, agents))


def _agent_reasons(agents: Iterable[str]) -> list[str]:
    """`robots.txt disallows <agent>` for each agent named by a product token (anything else is skipped).
    Never raises."""
    if isinstance(agents, str):
        agents = (agents,)
    try:
        return [f"robots.txt disallows {agent}" for agent in agents
                if isinstance(agent, str) and _TOKEN.fullmatch(agent)]
    except Exception:  # noqa: BLE001 - not iterable: no signal
        return []


def directive_reasons(headers: list[tuple[str, str]], meta: list[tuple[str, str]],
                      policy: OptOutPolicy = DEFAULT_OPTOUT_POLICY) -> list[str]:
    """Reasons from `X-Robots-Tag` headers and robots meta tags naming a reserving directive.

    Values are comma-separated and case-insensitive (Google's robots meta / X-Robots-Tag syntax); a
    header value may start with `agent:`, and then counts only for a configured AI agent; a meta
    tag counts when its name is `robots` or a configured AI agent. Never raises.
    """
    wanted = {d.lower() for d in policy.directives}
    agents = {a.lower() for a in policy.ai_agents}
    found: list[str] = []
    for name, value in headers:
        if name.lower() == "x-robots-tag":
            found += [f"x-robots-tag: {d}" for d in _directives(value, wanted, agents, agent_prefixes=True)]
    for name, value in meta:
        name = name.strip().lower()
        if name == "robots" or name in agents:
            found += [f"meta {name}: {d}" for d in _directives(value, wanted, agents, agent_prefixes=False)]
    return list(dict.fromkeys(found))


def _directives(value: str, wanted: set[str], agents: set[str], *, agent_prefixes: bool) -> list[str]:
    applies = True
    out: list[str] = []
    for part in value.split(","):
        token = part.strip().lower()
        if agent_prefixes and ":" in token:
            agent, _, token = token.partition(":")
            applies = agent.strip() in agents
            token = token.strip()
        if applies and token in wanted:
            out.append(token)
    return out


def tdmrep_reasons(url: str, headers: list[tuple[str, str]], meta: list[tuple[str, str]],
                   tdmrep_body: bytes | None, policy: OptOutPolicy = DEFAULT_OPTOUT_POLICY,
                   file_value: object = None) -> list[str]:
    """The TDMRep verdict: file rule, then header, then HTML meta, each superseding the one before it
    (TDMRep, "Processing priority"). `file_value` is the file rule's value already matched (0/1; else unset).

    Returns `[reason]` when the final `tdm-reservation` is 1, else []. Never raises.
    """
    value, source = None, ""
    if tdmrep_body is not None:
        rule = tdmrep_rule(url, tdmrep_body, policy)
        if rule is not None:
            value, source = rule, "tdmrep.json"
    if _reservation(file_value) is not None:
        value, source = _reservation(file_value), "tdmrep.json"
    header = _reservation(next((v for k, v in reversed(headers) if k.lower() == "tdm-reservation"), None))
    if header is not None:
        value, source = header, "tdmrep header"
    tag = _reservation(next((v for k, v in reversed(meta) if k.strip().lower() == "tdm-reservation"), None))
    if tag is not None:
        value, source = tag, "tdmrep meta"
    return [f"{source}: tdm-reservation=1"] if value == 1 else []


TdmrepRules = tuple[tuple[str, int], ...]   # (location pattern, tdm-reservation) in file order


def tdmrep_rule(url: str, body: bytes, policy: OptOutPolicy = DEFAULT_OPTOUT_POLICY) -> int | None:
    """`tdm-reservation` (0 or 1) of the first `/.well-known/tdmrep.json` rule matching `url`, else None
    (TDMRep, "TDM File on the Origin Server": `parse_tdmrep`, then `tdmrep_match`). Never raises."""
    return tdmrep_match(parse_tdmrep(body, policy), url)


def parse_tdmrep(body: bytes, policy: OptOutPolicy = DEFAULT_OPTOUT_POLICY) -> TdmrepRules:
    """The usable rules of a `/.well-known/tdmrep.json` body (TDMRep, "TDM File on the Origin Server").

    The file is a JSON array of {location, tdm-reservation, tdm-policy?}; its first `max_tdmrep_bytes`
    bytes and `max_tdmrep_rules` rules are read. Rules without a string location or with a value
    other than 0/1 are skipped (protocol errors mean "unset"); a body that is not such an array has
    no rules. Parse once, match many URLs (the frontier caches this per host). Never raises.
    """
    try:
        rules = json.loads(bytes(body[:policy.max_tdmrep_bytes]).decode("utf-8-sig"))
    except (ValueError, TypeError, RecursionError):   # bad JSON or UTF-8, not bytes, nesting bombs
        return ()
    if not isinstance(rules, list):
        return ()
    usable: list[tuple[str, int]] = []
    for rule in rules[:policy.max_tdmrep_rules]:
        if not isinstance(rule, dict) or not isinstance(rule.get("location"), str):
            continue
        value = _reservation(rule.get("tdm-reservation"))
        if value is not None:
            usable.append((rule["location"], value))
    return tuple(usable)


def tdmrep_match(rules: TdmrepRules, url: str) -> int | None:
    """`tdm-reservation` of the first of `rules` whose location matches `url`'s path, else None (TDMRep:
    the first rule in sequence wins; robots.txt `*` and `$`; case-sensitive; escaped unreserved
    characters decoded on both sides). Never raises."""
    if not rules:
        return None
    try:
        path = _unescape_unreserved(url_match_path(url))
    except Exception:  # noqa: BLE001 - an unparsable URL matches no rule
        return None
    for location, value in rules:
        if location_matches(location, path):
            return value
    return None


def location_matches(pattern: str, path: str) -> bool:
    """Whether a TDMRep `location` pattern matches a URL path (robots.txt syntax, RFC 9309 §2.2.3).

    The pattern is a prefix; `*` matches any run of characters; a final `$` anchors the end. Each
    piece after a `*` is taken at its leftmost occurrence, which is optimal, so hostile patterns
    run in linear time. A pattern not starting with `/` or `*` is read with a leading `/`.
    """
    pattern = _unescape_unreserved(pattern.strip())
    if not pattern:
        return False
    if pattern[0] not in "/*":
        pattern = "/" + pattern
    anchored = pattern.endswith("$")
    pieces = (pattern[:-1] if anchored else pattern).split("*")
    head, tail = pieces[0], pieces[1:]
    if not path.startswith(head):
        return False
    if not tail:
        return not anchored or path == head
    pos = len(head)
    for piece in tail[:-1]:
        found = path.find(piece, pos)
        if found < 0:
            return False
        pos = found + len(piece)
    last = tail[-1]
    if anchored:
        return path.endswith(last) and len(path) - len(last) >= pos
    return path.find(last, pos) >= 0


def _unescape_unreserved(text: str) -> str:
    text = _ESCAPED_UNRESERVED.sub(lambda m: chr(int(m.group(0)[1:], 16)), text)
    return _OTHER_ESCAPE.sub(lambda m: m.group(0).upper(), text)


def _reservation(value: object) -> int | None:
    """0 or 1 from an integer or its decimal text; anything else is a protocol error, i.e. unset
    (TDMRep, "tdm-reservation")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value in (0, 1) else None
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value.strip())
    return None


def _pairs(headers: object) -> list[tuple[str, str]]:
    """(name, value) string pairs from a mapping or an iterable of pairs; anything malformed is skipped."""
    try:
        items = list(headers.items() if isinstance(headers, Mapping) else headers)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not iterable, or a mapping that fails: no headers
        return []
    return [(item[0], item[1]) for item in items
            if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], str)]
