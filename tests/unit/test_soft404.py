"""udfs.soft404: the probe URL, the probe row, the honest-host rule, the comparison, the synthetic web's soft 404s."""
from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthweb import Behaviour, HostOverride, RobotsVariant, WebPolicy, build_web
from synthweb.generate import default_corpus
from synthweb.render import Router
from udfs.config import SECTIONS, ConfigError, load_config
from udfs.links import extract
from udfs.simhash import simhash
from udfs.soft404 import (
    DEFAULT_SOFT404_POLICY,
    PROBE_WORDS,
    ProbeRow,
    Soft404Policy,
    is_honest,
    is_soft_404,
    normalize_title,
    preflight_answer,
    probe_due,
    probe_url,
)

T0 = 1_700_000_000.0
P = DEFAULT_SOFT404_POLICY
FP = 0x0123_4567_89AB_CDEF
PROBE = ProbeRow(200, FP, 1000, "page not found", T0)


# --- policy ---------------------------------------------------------------------------------------

def test_defaults_are_the_documented_ones() -> None:
    assert (P.max_hamming, P.use_title, P.min_length_ratio) == (3, True, 0.8)
    assert (P.reprobe_after_s, P.retry_after_s) == (30 * 86_400.0, 86_400.0)
    assert P.preflight_answers is True


@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_hamming", 65, "max_hamming must be an integer within"),
    ("max_hamming", True, "max_hamming"),
    ("use_title", 1, "use_title must be true or false"),
    ("preflight_answers", "yes", "preflight_answers must be true or false"),
    ("min_length_ratio", 1.5, "min_length_ratio must be within"),
    ("reprobe_after_s", 0, "reprobe_after_s must be a finite number > 0"),
    ("retry_after_s", float("nan"), "retry_after_s"),
])
def test_policy_rejects_invalid_values_naming_them(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Soft404Policy(**{field: value})


def test_policy_loads_as_a_config_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SECTIONS, "soft404", "udfs.soft404:Soft404Policy")
    assert load_config("[soft404]\nuse_title = false\n").soft404 == Soft404Policy(use_title=False)
    with pytest.raises(ConfigError, match="max_hamming"):
        load_config("", ["soft404.max_hamming=99"])


# --- the probe URL --------------------------------------------------------------------------------

def test_probe_url_looks_like_a_page_and_is_deterministic_for_a_seeded_rng() -> None:
    url = probe_url("www.example.com", random.Random(7))
    m = re.fullmatch(r"http://www\.example\.com/([a-z]+)-([0-9a-f]{16})\.html", url)
    assert m and m.group(1) in PROBE_WORDS
    assert probe_url("www.example.com", random.Random(7)) == url
    assert probe_url("www.example.com", random.Random(8)) != url
    assert probe_url("h.test:8080", random.Random(1), scheme="https").startswith("https://h.test:8080/")


def test_probe_urls_do_not_repeat() -> None:
    rng = random.Random(3)
    assert len({probe_url("h.test", rng) for _ in range(2000)}) == 2000


# --- rows and the honest-host rule ----------------------------------------------------------------

@pytest.mark.parametrize(("status", "honest"), [(404, True), (410, True), (200, False), (301, False),
                                                (503, False), (None, False)])
def test_a_probe_answered_404_or_410_marks_an_honest_host(status, honest) -> None:
    assert is_honest(ProbeRow.of(status, None, 0, None, T0)) is honest
    assert not is_honest(None)


def test_an_honest_host_is_never_checked() -> None:
    honest = ProbeRow(404, FP, 1000, "page not found", T0)
    assert not is_soft_404(honest, 200, FP, 1000, "Page not found")


def test_probe_rows_read_event_fields_defensively() -> None:
    row = ProbeRow.of(True, -1, "12", ["x"], T0)
    assert (row.status, row.simhash, row.length, row.title) == (None, None, 0, "")
    assert ProbeRow.of(200, FP, 10, "  Page\n NOT   found ", T0).title == "page not found"


def test_probe_rows_round_trip_through_plain_json_with_a_version() -> None:
    text = PROBE.to_row()
    assert json.loads(text)["v"] == 1
    assert ProbeRow.from_row(text) == PROBE
    none = ProbeRow.of(None, None, 0, None, T0)
    assert ProbeRow.from_row(none.to_row()) == none


@pytest.mark.parametrize(("text", "message"), [
    ('{"v":2,"status":200,"simhash":1,"length":1,"title":"","at":0}', "schema version 2"),
    ('{"v":1,"status":"200","simhash":1,"length":1,"title":"","at":0}', "malformed"),
    ('{"v":1,"status":200,"simhash":1,"length":1,"title":"Big","at":0}', "malformed"),
    ('{"v":1,"status":200,"simhash":1,"length":1,"title":"","at":"now"}', "malformed"),
    ('{"v":1,"status":200}', "malformed"),
    ("null", "schema version None"),
    ("}", "malformed"),
])
def test_a_foreign_or_malformed_probe_row_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProbeRow.from_row(text)


@pytest.mark.parametrize(("probe", "elapsed", "due"), [
    (None, 0.0, True),
    (ProbeRow(404, None, 10, "", T0), 29 * 86_400.0, False),
    (ProbeRow(404, None, 10, "", T0), 30 * 86_400.0, True),
    (ProbeRow(200, FP, 10, "", T0), 30 * 86_400.0, True),
    (ProbeRow(200, None, 10, "", T0), 86_400.0, True),     # a 200 without text: inconclusive
    (ProbeRow(503, None, 10, "", T0), 86_399.0, False),
    (ProbeRow(None, None, 0, "", T0), 86_400.0, True),    # timeout or network error
    (ProbeRow(301, None, 0, "", T0), -5.0, False),        # a clock before the answer
])
def test_probe_due_repeats_conclusive_answers_rarely_and_inconclusive_ones_daily(probe, elapsed, due) -> None:
    assert probe_due(probe, T0 + elapsed) is due


# --- a tdmrep.json answer standing in for the probe (decision 1821) -------------------------------

@pytest.mark.parametrize(("probe", "status", "redirected", "answer"), [
    (None, 404, None, 404),                                          # never probed: the 404 answers it
    (None, 410, False, 410),
    (None, 404, True, None),                                         # another URL's 404 says nothing
    (None, 200, None, None), (None, 403, None, None), (None, 503, None, None),
    (None, 404.0, None, None), (None, True, None, None), (None, "404", None, None),   # hostile events
    (ProbeRow(503, None, 0, "", T0 - 86_400.0), 404, None, 404),     # an inconclusive probe now due
    (ProbeRow(404, None, 0, "", T0 - 86_400.0), 404, None, None),    # an honest answer not yet due
    (ProbeRow(200, FP, 900, "not found", T0 - 31 * 86_400.0), 404, None, None),   # once suspect: probed again
])
def test_a_hosts_own_404_to_tdmrep_json_answers_a_due_probe(probe, status, redirected, answer) -> None:
    row = preflight_answer(probe, status, redirected, T0)
    assert (row.status if row is not None else None) == answer
    if row is not None:
        assert is_honest(row) and row == ProbeRow(answer, None, 0, "", T0)
        assert not probe_due(row, T0 + 29 * 86_400.0)


def test_preflight_answers_can_be_switched_off() -> None:
    assert preflight_answer(None, 404, None, T0, Soft404Policy(preflight_answers=False)) is None


# --- the comparison -------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "fp", "length", "title", "soft"), [
    (200, FP, 1000, None, True),                    # the same text
    (200, FP ^ 0b111, 950, None, True),             # within 3 bits, 5% shorter
    (200, FP ^ 0b1111, 1000, None, False),          # 4 bits apart
    (200, FP, 700, None, False),                    # the same text but much shorter: not the error page
    (200, FP, 1300, None, False),                   # much longer
    (200, ~FP & (2**64 - 1), 1000, "Page  Not Found", True),   # different text, the probe's title
    (200, ~FP & (2**64 - 1), 1000, "Our products", False),
    (200, ~FP & (2**64 - 1), 1000, "", False),
    (200, ~FP & (2**64 - 1), 500, "Page not found", False),   # the title alone needs a similar length
    (404, FP, 1000, "Page not found", False),       # only 200s are suspects
    (304, FP, 1000, None, False),
    (None, FP, 1000, None, False),
])
def test_is_soft_404_compares_a_200_page_with_the_probe(status, fp, length, title, soft) -> None:
    assert is_soft_404(PROBE, status, fp, length, title) is soft


def test_the_title_rule_can_be_switched_off() -> None:
    other = ~FP & (2**64 - 1)
    assert is_soft_404(PROBE, 200, other, 1000, "Page not found")
    assert not is_soft_404(PROBE, 200, other, 1000, "Page not found", Soft404Policy(use_title=False))


@pytest.mark.parametrize("probe", [None, ProbeRow(503, None, 0, "", T0), ProbeRow(301, None, 0, "", T0),
                                   ProbeRow(200, None, 1000, "page not found", T0)])
def test_without_a_conclusive_200_probe_nothing_is_a_soft_404(probe) -> None:
    assert not is_soft_404(probe, 200, FP, 1000, "Page not found")


def test_empty_bodies_say_nothing() -> None:
    assert not is_soft_404(ProbeRow(200, 0, 0, "", T0), 200, 0, 0, "")


_anything = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=10), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(status=_anything, fp=_anything, length=_anything, title=_anything,
       probe_length=st.integers(0, 10**7), probe_title=st.text(max_size=20))
def test_is_soft_404_never_raises_on_hostile_values(status, fp, length, title, probe_length, probe_title) -> None:
    probe = ProbeRow.of(200, FP, probe_length, probe_title, T0)
    assert is_soft_404(probe, status, fp, length, title) in (True, False)
    assert normalize_title(title) == normalize_title(normalize_title(title))


# --- the synthetic web's soft-404 host ------------------------------------------------------------

B = Behaviour
WEB_POLICY = WebPolicy(behaviour_share=0.0)
OVERRIDES = {0: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset({B.SOFT_404})),
             1: HostOverride(robots=RobotsVariant.EMPTY, behaviours=frozenset())}
# Paths a crawler meets on a soft-404 host that do not exist: the web's broken links, typos, deep paths.
MISSING = ["/missing-7.html", "/missing-123.html", "/missing-999.html", "/x", "/old/page.php?id=12",
           "/products/widget-9000.html", "/about-us", "/news/2024/05/a-story-that-was-removed.html",
           "/search/results/page/12/", "/" + "a" * 40 + ".html"]


@pytest.fixture(scope="module")
def synthweb():
    web = build_web(4, seed=5, policy=WEB_POLICY, overrides=OVERRIDES)
    return web, Router(web, default_corpus(), port=8000)


def _answer(router: Router, host, path: str) -> tuple[int, int | None, int, str | None]:
    """(status, SimHash, body length, title) of a synthetic-web answer, as the parse stage computes them."""
    reply = router.respond(host.name, host.ip, "GET", path)
    if reply.status != 200:
        return reply.status, None, len(reply.body), None
    found = extract(f"http://{host.name}{path}", reply.headers, reply.body)
    return reply.status, simhash(found.text), len(reply.body), found.title


def _probe(router: Router, host, seed: int) -> ProbeRow:
    url = probe_url(host.name, random.Random(seed))
    return ProbeRow.of(*_answer(router, host, url.split(host.name, 1)[1]), at=T0)


def test_the_synthetic_web_serves_soft_404s_and_honest_404s(synthweb) -> None:
    web, router = synthweb
    soft, honest = web.hosts[0], web.hosts[1]
    assert B.SOFT_404 in soft.behaviours and B.SOFT_404 not in honest.behaviours
    assert _probe(router, soft, 1).status == 200
    assert is_honest(_probe(router, honest, 1))


@pytest.mark.parametrize("seed", range(5))
def test_every_missing_path_of_a_soft_404_host_is_caught_and_no_real_page_is(synthweb, seed: int) -> None:
    web, router = synthweb
    host = web.hosts[0]
    probe = _probe(router, host, seed)
    caught = [p for p in MISSING if is_soft_404(probe, *_answer(router, host, p))]
    assert caught == MISSING
    flagged = [p.path for p in host.pages if is_soft_404(probe, *_answer(router, host, p.path))]
    assert flagged == []


def test_the_synthetic_soft_404s_need_the_title_rule(synthweb) -> None:
    # Decision 1802: the error page echoes the path, so SimHash alone (k = 3) misses most of them.
    web, router = synthweb
    host = web.hosts[0]
    probe = _probe(router, host, 0)
    no_title = Soft404Policy(use_title=False)
    by_hash = [p for p in MISSING if is_soft_404(probe, *_answer(router, host, p), policy=no_title)]
    assert len(by_hash) < len(MISSING) / 2
