"""The crawl's configuration: every policy a typed, frozen value with its default in one place.

Each section is a frozen dataclass that lives beside the logic it steers (`UrlPolicy` in
`udfs/urls.py`, `RobotsPolicy` in `udfs/robots.py`, ...); the dataclass field defaults ARE the
documented defaults. A deployment overrides only what it changes, from a TOML file and
`--set section.key=value` pairs. Anything unknown or mistyped is an error that names the key
(StormCrawler's override-only `crawler-conf.yaml`; Scrapy's `default_settings.py`).
"""
from __future__ import annotations

import dataclasses
import importlib
import tomllib
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value is unknown, mistyped or out of range; the message names the key."""


# section name -> "module:ClassName". Imported lazily so this module stays cheap and acyclic.
SECTIONS: dict[str, str] = {
    "urls": "udfs.urls:UrlPolicy",
    "robots": "udfs.robots:RobotsPolicy",
    "extract": "udfs.links:ExtractPolicy",
    "traps": "udfs.traps:TrapPolicy",
    "sitemaps": "udfs.sitemaps:SitemapPolicy",
    "frontier": "udfs.frontier.policy:FrontierPolicy",
    "politeness": "udfs.politeness:PolitenessPolicy",
    "fetch": "udfs.netguard:FetchPolicy",
    "warc": "udfs.warc:WarcPolicy",
    "job": "udfs.jobconfig:JobPolicy",
    "storage": "udfs.storage:StoragePolicy",
    "ipgate": "udfs.ip_gate:IpGatePolicy",
    "bloom": "udfs.bloom:BloomPolicy",
    "dedup": "udfs.dedup:DedupPolicy",
    "recrawl": "udfs.recrawl:RecrawlPolicy",
    "host_quality": "udfs.host_quality:QualityPolicy",
    "retention": "udfs.retention:RetentionPolicy",
    "optout": "udfs.optout:OptOutPolicy",
    "discovery": "udfs.recent:DiscoveryPolicy",
    "soft404": "udfs.soft404:Soft404Policy",
    "budgets": "udfs.budgets:BudgetPolicy",
    "control": "udfs.control_state:ControlPolicy",
    "render": "udfs.render_policy:RenderPolicy",
}


def section_class(name: str) -> type:
    try:
        target = SECTIONS[name]
    except KeyError:
        raise ConfigError(f"unknown section [{name}]; known sections: {', '.join(sorted(SECTIONS))}") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


@dataclasses.dataclass(frozen=True)
class CrawlConfig:
    """All sections, each a frozen policy dataclass."""

    sections: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.sections[name]
        except KeyError:
            raise AttributeError(name) from None

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {name: _plain(dataclasses.asdict(value)) for name, value in self.sections.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (frozenset, set)):
        return sorted(_plain(v) for v in value)  # a stable order, so printed configs diff cleanly
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def parse_value(text: str) -> Any:
    """A `--set` value: TOML syntax when it parses (numbers, booleans, lists), else the bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(pairs: list[str]) -> dict[str, dict[str, Any]]:
    """Turn `["robots.cache_ttl_s=3600", ...]` into nested mappings; rejects malformed pairs."""
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        section, dot, field = key.strip().partition(".")
        if not sep or not dot or not section or not field:
            raise ConfigError(f"--set {pair!r}: expected SECTION.KEY=VALUE, e.g. politeness.default_delay_s=2")
        out.setdefault(section, {})[field] = parse_value(raw.strip())
    return out


def _is_number(value: Any) -> bool:
    """An int or float as TOML gives it; not a bool, which Python counts as an int."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: cannot be {value!r}")
    if origin in (tuple, list, frozenset, set):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed shape, e.g. tuple[str, float]
            if len(value) != len(args):
                raise ConfigError(f"{where}: expected {len(args)} values, got {value!r}")
            return tuple(_coerce(v, a, where) for v, a in zip(value, args))
        inner = args[0] if args else Any
        items = [_coerce(v, inner, where) for v in value]
        return frozenset(items) if origin is frozenset else (tuple(items) if origin is tuple else items)
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if annotation is float:
        if _is_number(value):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if isinstance(annotation, type) and issubclass(annotation, __import__("enum").Enum):
        try:
            return annotation(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in annotation)
            raise ConfigError(f"{where}: {value!r} is not one of {allowed}") from None
    return value


def build_section(name: str, values: dict[str, Any]) -> Any:
    """One policy from its defaults plus `values`; unknown keys and bad types raise ConfigError."""
    cls = section_class(name)
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError(f"[{name}] unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(fields))}")
    kwargs = {k: _coerce(v, hints[k], f"{name}.{k}") for k, v in values.items()}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"[{name}] {exc}") from None


def load_config(toml_text: str = "", overrides: list[str] | None = None) -> CrawlConfig:
    """The effective configuration: defaults, then the TOML document, then `--set` overrides."""
    try:
        doc = tomllib.loads(toml_text) if toml_text.strip() else {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file is not valid TOML: {exc}") from None
    for section, table in doc.items():
        if not isinstance(table, dict):
            raise ConfigError(f"top-level key {section!r} must be a [section] table")
        section_class(section)  # unknown section → error naming the known ones
    for section, table in parse_overrides(overrides or []).items():
        section_class(section)
        doc.setdefault(section, {}).update(table)
    for (section, key), derive in DERIVED.items():
        if key not in doc.get(section, {}):
            doc.setdefault(section, {})[key] = derive(doc)
    config = CrawlConfig({name: build_section(name, doc.get(name, {})) for name in SECTIONS})
    _check_across(config)
    return config


def _check_across(config: CrawlConfig) -> None:
    """Limits one section's value sets on another's; raises ConfigError naming both keys."""
    every, lease = config.warc.lease_extend_every_s, config.frontier.lease_timeout_s
    if every > lease / 2:   # an extension must reach the frontier before the deadline the last one set
        raise ConfigError(f"warc.lease_extend_every_s ({every!r}) must be at most half of "
                          f"frontier.lease_timeout_s ({lease!r}), or 0 (no extensions)")
    if config.render.enabled:   # a render lease fetches its page, then renders it, within one lease
        total, page = config.fetch.total_timeout_s, config.render.page_timeout_s
        if total + page >= lease:
            raise ConfigError(f"fetch.total_timeout_s ({total!r}) + render.page_timeout_s ({page!r}) must be below "
                              f"frontier.lease_timeout_s ({lease!r}) when render.enabled: a render lease would "
                              f"expire before its page is fetched and rendered")


def _user_agent(doc: dict[str, Any]) -> str:
    return doc.get("fetch", {}).get("user_agent") or section_class("fetch")().user_agent


def _product_token(user_agent: str) -> str:
    """RFC 9309 §2.2.1: the product token is the User-Agent's name, before any `/` version or comment."""
    return user_agent.strip().split("/", 1)[0].split(None, 1)[0]


def _robots_max_bytes(doc: dict[str, Any]) -> int:
    return doc.get("robots", {}).get("max_bytes") or section_class("robots")().max_bytes


def _gate_max_wait(doc: dict[str, Any]) -> float:
    lease = doc.get("frontier", {}).get("lease_timeout_s", section_class("frontier")().lease_timeout_s)
    total = doc.get("fetch", {}).get("total_timeout_s", section_class("fetch")().total_timeout_s)
    if not (_is_number(lease) and _is_number(total)):
        return section_class("ipgate")().max_wait_s  # the mistyped key is reported by its own section
    return importlib.import_module("udfs.ip_gate").max_wait_for(float(lease), float(total))


def _release_target(doc: dict[str, Any]) -> float:
    """The frontier's release target (decision 1834): its default, plus the longest a completion waits
    for its WARC file's upload when the root is object storage (decision 0504)."""
    target = section_class("frontier")().release_target_s
    root = doc.get("job", {}).get("warc_root", section_class("job")().warc_root)
    age = doc.get("storage", {}).get("max_file_age_s", section_class("storage")().max_file_age_s)
    if not isinstance(root, str) or not _is_number(age):
        return target  # the mistyped key is reported by its own section
    if not importlib.import_module("udfs.storage").is_s3_root(root):
        return target
    return target + float(age)


def _lease_extend_every(doc: dict[str, Any]) -> float:
    """The writer's lease extension interval (decision 3783): its default, or a third of the frontier's
    lease when that is shorter, so an extension always lands before the deadline the last one set."""
    every = section_class("warc")().lease_extend_every_s
    lease = doc.get("frontier", {}).get("lease_timeout_s", section_class("frontier")().lease_timeout_s)
    if not _is_number(lease) or lease <= 0:
        return every  # the bad key is reported by its own section
    return min(every, float(lease) / 3.0)


# Values with one home elsewhere: unless a deployment sets them explicitly, they follow their source,
# so changing `fetch.user_agent` also changes which robots.txt group applies (RFC 9309 §2.2.1).
DERIVED: dict[tuple[str, str], Any] = {
    ("frontier", "robots_agent"): _user_agent,
    ("extract", "user_agent_token"): lambda doc: _product_token(_user_agent(doc)).lower(),
    ("fetch", "robots_max_bytes"): _robots_max_bytes,
    # a request released at the IP gate must be able to finish before its frontier lease expires
    ("ipgate", "max_wait_s"): _gate_max_wait,
    # held completions wait for their WARC file's upload: the release target covers that wait
    ("frontier", "release_target_s"): _release_target,
    # a held capture's lease is extended often enough for its frontier's lease length
    ("warc", "lease_extend_every_s"): _lease_extend_every,
}


def defaults_as_toml(config: CrawlConfig | None = None) -> str:
    """Every section with its values (the defaults unless `config` is given), as TOML."""
    lines: list[str] = []
    for name, values in (config or load_config()).as_dict().items():
        lines.append(f"[{name}]")
        for key, value in values.items():
            if value is None:
                lines.append(f"# {key} = (unset)")
            else:
                lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return repr(str(value))
