"""BENCHMARKS.md sections a benchmark owns: the text between its begin and end markers."""
from __future__ import annotations

import re


def replace_between(text: str, section: str, begin: str, end: str, heading: str) -> str:
    """`text` with the part from `begin` to `end` replaced by `section` (which carries both markers);
    appended under `heading` when the markers are absent."""
    if begin not in text or end not in text:
        return text.rstrip("\n") + f"\n\n{heading}\n\n" + section + "\n"
    return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S)
