"""udfs.text.squash: whitespace stripped and collapsed, cut to a limit; with a limit it reads only a prefix
of a long text and still gives what collapsing the whole text and cutting it gives."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from udfs.text import squash

WORDS = st.lists(st.one_of(st.text(alphabet="ab\u00e9", min_size=1, max_size=30),
                           st.text(alphabet=" \t\n\u00a0\u2003\u3000", min_size=1, max_size=40)), max_size=60)


@given(WORDS, st.integers(min_value=0, max_value=400))
def test_a_cut_text_is_the_whole_collapsed_text_cut(parts: list[str], limit: int) -> None:
    text = "".join(parts)
    assert squash(text, limit) == " ".join(text.split())[:limit].rstrip()


def test_without_a_limit_every_run_of_whitespace_becomes_one_space() -> None:
    assert squash("  a \t\n b\u00a0\u2003c  ") == "a b c"


def test_a_word_cut_by_the_prefix_is_never_cut_short_in_the_answer() -> None:
    text = "x" * 150 + " " + "y" * 10_000
    assert squash(text, 200) == ("x" * 150 + " " + "y" * 49)


class _Reads(str):
    """A text that records how far into it squash reads."""

    read_to = 0

    def __getitem__(self, key):
        if isinstance(key, slice):
            _Reads.read_to = max(_Reads.read_to, len(self) if key.stop is None else key.stop)
        return str.__getitem__(self, key)

    def split(self, sep=None, maxsplit=-1):
        _Reads.read_to = len(self)
        return str.split(self, sep, maxsplit)


def test_a_long_text_is_read_only_as_far_as_its_limit_needs() -> None:
    text = _Reads("lorem ipsum dolor sit amet " * 200_000)   # 5.4 MB
    assert len(squash(text, 200_000)) == 200_000
    assert _Reads.read_to <= 2 * 200_000 + 64
