"""BENCHMARKS.md sections a benchmark owns: the text between its begin and end markers."""
from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
# The heading the rendering tier's sections go under when BENCHMARKS.md has neither yet.
RENDER_HEADING = "## Rendering tier (`make bench-render`)"


def replace_between(text: str, section: str, begin: str, end: str, heading: str) -> str:
    """`text` with the part from `begin` to `end` replaced by `section` (which carries both markers);
    appended under `heading` when the markers are absent."""
    if begin not in text or end not in text:
        return text.rstrip("\n") + f"\n\n{heading}\n\n" + section + "\n"
    return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S)


def write_section(section: str, begin: str, end: str, heading: str, path: Path = BENCHMARKS) -> None:
    """Replace a benchmark's section of BENCHMARKS.md (`replace_between`)."""
    path.write_text(replace_between(path.read_text(), section, begin, end, heading))
