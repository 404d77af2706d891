"""How much of an HTML document the parser may build: a linear scan that caps nesting depth and elements.

An HTML tree builder checks "has an element in scope" by walking its stack of open elements, so a
document of N nested block elements costs it O(N²): 16,000 nested `<div>` take lexbor about half a
second, 32,000 about three (docs/decisions/3700). `document_cut` reads the tags of the decoded
text once, keeps a model of that stack, and names the first offset at which the document would go
deeper than `max_depth` or open more than `max_elements` elements; the parse step builds the tree of
the text before it. The model follows the tree-construction rules that keep real pages shallow
(HTML §13.2.6): void elements are never open, an element with an optional end tag closes the ones it
implies at the top of the stack (`<li>` an open `<li>` or `<p>`, `<td>` a `<td>` or `<th>`, a block a
`<p>`), an end tag closes up to its element when one is open and is ignored otherwise, and the text of
comments and raw-text elements (script, style, textarea, ...) holds no tags. Where the model and a
browser differ, the model keeps more elements open than the browser does, so the cap errs towards
cutting a malformed page early, never towards letting a deep one through.

Cost: one regular-expression step and a few set operations per tag, with an open-element count per
name so that an end tag never searches the stack. Pure, no I/O; never raises on any text.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

# HTML §13.1.2: elements that never have contents or an end tag.
VOID = frozenset({
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image", "img", "input",
    "keygen", "link", "meta", "param", "source", "track", "wbr",
})
# Elements whose text is not parsed for tags (HTML §13.1.2.1 raw text and escapable raw text, plus the
# legacy ones the tokenizer treats alike): the scan skips to their end tag.
# `<noscript>` is raw text because the parse step parses with scripting enabled (decision 0300).
RAW_TEXT = frozenset({"script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "noscript"})
# `<plaintext>` makes the rest of the document text.
_PLAINTEXT = "plaintext"
# A start tag of the key closes these while they are the current node (HTML §13.2.6.4.7 and the
# optional end tags of §13.1.2.4).
_CLOSES_AT_TOP: dict[str, frozenset[str]] = {
    "li": frozenset({"li", "p"}),
    "dt": frozenset({"dt", "dd", "p"}),
    "dd": frozenset({"dt", "dd", "p"}),
    "option": frozenset({"option"}),
    "optgroup": frozenset({"option", "optgroup"}),
    "tr": frozenset({"td", "th", "tr"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
    "thead": frozenset({"td", "th", "tr", "thead", "tbody", "tfoot"}),
    "tbody": frozenset({"td", "th", "tr", "thead", "tbody", "tfoot"}),
    "tfoot": frozenset({"td", "th", "tr", "thead", "tbody", "tfoot"}),
    "rb": frozenset({"rb", "rt", "rp", "rtc"}),
    "rt": frozenset({"rb", "rt", "rp"}),
    "rp": frozenset({"rb", "rt", "rp"}),
    "rtc": frozenset({"rb", "rt", "rp", "rtc"}),
}
# Start tags that close an open `<p>` ("close a p element", HTML §13.2.6.4.7).
_CLOSES_P = frozenset({
    "address", "article", "aside", "blockquote", "center", "details", "dialog", "dir", "div", "dl", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr",
    "listing", "main", "menu", "nav", "ol", "p", "pre", "search", "section", "summary", "table", "ul",
})
_P_ONLY = frozenset({"p"})
# Elements the tree builder opens once whatever the markup says.
_SINGLETONS = frozenset({"html", "head", "body"})
# Roots of foreign content, where a self-closing tag (`<path/>`) opens nothing (HTML §13.2.6.5).
_FOREIGN = frozenset({"svg", "math"})
# Start tags that end foreign content: the tree builder pops back to HTML before inserting them.
_BREAKOUT = frozenset({
    "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em", "embed", "h1", "h2",
    "h3", "h4", "h5", "h6", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol", "p", "pre",
    "ruby", "s", "small", "span", "strong", "strike", "sub", "sup", "table", "tt", "u", "ul", "var",
})
# A text with at most this many "<" is not scanned: however they nest, lexbor builds their tree in about
# the time the largest real pages take (4,096 nested <div>: 39 ms; the slowest of 990 real pages: 23 ms).
# 97% of 990 real pages have fewer (median 1,366), so the scan's cost (about a third of an extraction on
# the pages it reads) falls on few pages.
UNSCANNED_TAGS = 4096
# The start of a start or end tag: ("/" for an end tag, its name). Attributes are not read: only names
# change the model, and reading attributes would cost the scan several times as much.
_TAG = re.compile(r"<(/?)([a-z][^\s/<>]*)", re.IGNORECASE)
# Where tags are not tags: comments and the contents of raw-text elements.
_SKIPPED = re.compile(r"<!--|<(" + "|".join(sorted(RAW_TEXT)) + r"|plaintext)[\s/>]", re.IGNORECASE)
_END_OF = {name: re.compile(f"</{name}", re.IGNORECASE) for name in RAW_TEXT}
# Characters of text read per step of the scan.
_WINDOW = 32 * 1024


@dataclasses.dataclass(frozen=True)
class Cut:
    """Where the parser must stop: `offset` in the text, and which cap `reason` names ("depth" or "elements")."""

    offset: int
    reason: str


def document_cut(text: str, max_depth: int, max_elements: int) -> Cut | None:
    """The first offset of `text` at which a tree builder would hold more than `max_depth` open
    elements or have opened more than `max_elements`, or None when the whole document stays within
    both (see the module docstring for the model). `max_depth` counts elements below `<body>`/`<head>`.
    A text of at most `UNSCANNED_TAGS` tags is within both by definition: its cost is bounded anyway.
    """
    if text.count("<") <= UNSCANNED_TAGS:
        return None   # too few tags for a costly tree, however they nest
    stack: list[str] = []
    open_count: dict[str, int] = {}   # open elements by name, so an end tag never searches the stack
    foreign = 0                        # open <svg> and <math> elements
    elements = 0
    for start, end in _tag_spans(text):
        for index, (end_tag, name) in enumerate(_TAG.findall(text, start, end)):
            name = name.lower()
            if end_tag:   # closes up to its element if one is open, else is ignored
                if open_count.get(name):
                    while (top := stack.pop()) != name:
                        open_count[top] -= 1
                    open_count[name] -= 1
                    if foreign:
                        foreign = open_count.get("svg", 0) + open_count.get("math", 0)
                continue
            elements += 1
            if elements > max_elements:
                return Cut(_offset_of(text, start, end, index), "elements")
            if name in VOID or name in _SINGLETONS:
                continue
            if foreign:
                if name not in _BREAKOUT:
                    continue   # nested foreign elements cost a tree builder no scope walks
                while foreign:   # back to HTML: the foreign elements and everything in them close
                    top = stack.pop()
                    open_count[top] -= 1
                    foreign -= top in _FOREIGN
            closes = _CLOSES_AT_TOP.get(name) or (_P_ONLY if name in _CLOSES_P else None)
            while closes is not None and stack and stack[-1] in closes:
                open_count[stack.pop()] -= 1
            stack.append(name)
            open_count[name] = open_count.get(name, 0) + 1
            foreign += name in _FOREIGN
            if len(stack) > max_depth:
                return Cut(_offset_of(text, start, end, index), "depth")
    return None


def _offset_of(text: str, start: int, end: int, index: int) -> int:
    """Where the `index`-th tag of the span starts."""
    for position, match in enumerate(_TAG.finditer(text, start, end)):
        if position == index:
            return match.start()
    return end


def _tag_spans(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) spans of `text` whose tags the tree builder acts on, in order and a window at a
    time (a scan that stops early reads little more than it needs): the text between comments and
    raw-text elements (HTML §13.2.5), including the raw-text elements' own start tags, whose text the
    scan skips. A comment or raw-text element left open runs to the end of the text. Windows end where
    a "<" starts, so no tag crosses one."""
    position, size = 0, len(text)
    while position < size:
        window_end = text.find("<", position + _WINDOW)
        window_end = size if window_end < 0 else window_end
        found = _SKIPPED.search(text, position, window_end)
        if found is None:
            yield position, window_end
            position = window_end
            continue
        name = found.group(1)
        if name is None:   # a comment
            yield position, found.start()
            close = text.find("-->", found.end())
            skip_to = -1 if close < 0 else close + 3
        else:              # a raw-text element: its start tag counts, its text does not
            name = name.lower()
            tag_end = text.find(">", found.end() - 1)
            yield position, size if tag_end < 0 else tag_end + 1
            close = None if name == _PLAINTEXT or tag_end < 0 else _END_OF[name].search(text, tag_end)
            skip_to = -1 if close is None else close.start()   # the end tag is scanned: it closes the element
        if skip_to < 0:
            return
        position = skip_to
