"""Readable text from HTML with the standard library's parser: good enough for a model to
read a page, without a new dependency.

The parser's cost is not linear in hostile input (50 KB of `<a <a <a ...` takes seconds,
5 MB hours on Python 3.11), and a fetched page is written by whoever runs the server it
came from: `page_text` is what web_fetch runs in a killable worker (`fim.tools.isolate`).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from fim.masking import Masker
from fim.tools.builtin._common import clip

_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
_BLOCK = {
    "p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "br",
    "li", "ul", "ol", "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
    "blockquote", "form", "hr", "dd", "dt", "dl", "figure", "figcaption",
}  # fmt: skip


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """Return (title, text): scripts and styles dropped, blocks on their own lines,
    whitespace collapsed."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    lines = (re.sub(r"[ \t\r\f\v\xa0]+", " ", line).strip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return " ".join(parser.title.split()), text


def page_text(html: str, limit: int, masker: Masker | None = None) -> str:
    """The page as the model reads it (title, then text), masked and cut to `limit`
    characters; runs inside the isolated worker, so the parent hands it its `masker` (the
    worker's own `known()` may predate a secret)."""
    title, text = html_to_text(html)
    return clip((f"Title: {title}\n\n" if title else "") + text, limit, "page", masker)
