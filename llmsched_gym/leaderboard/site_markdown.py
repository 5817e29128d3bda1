"""A small, safe Markdown-to-HTML renderer for the leaderboard site (``leaderboard site``).

Submission READMEs are untrusted text, so this renders only the subset they use (ATX headings,
paragraphs, nested bullet and numbered lists, pipe tables, fenced code, block quotes, rules,
inline code, emphasis and links) and HTML-escapes everything else: raw HTML shows as text, never
as markup. Links are never followed blindly:

* a relative target the caller's ``link`` function maps to a page or file of the site becomes an
  ``<a href>`` to it (the site is self-contained, so nothing else is linked);
* an external target (``http:``, ``mailto:``, any other scheme or ``//host``) is shown as text,
  ``label (external link: URL)``, in a ``span.external``: a reader can copy it, the page never
  loads it and no click leaves the site;
* a ``javascript:``, ``vbscript:`` or ``data:`` target is refused: the label shows, marked
  ``(link refused)``, and the target is dropped;
* any other target (a file the site does not carry) shows as the label and the target in code.

Images (``![alt](src)``) show their alt text only. No dependency beyond the standard library.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

__all__ = ["REFUSED_SCHEMES", "link_kind", "render_markdown"]

REFUSED_SCHEMES = ("javascript", "vbscript", "data")
"""Link schemes that run code or smuggle content: their targets are dropped, never rendered."""

LinkResolver = Callable[[str], "str | None"]
"""Maps a relative link target to an href inside the site, or None when the site lacks it."""

_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$")
_LINK = re.compile(r"(!?)\[((?:[^\[\]\\]|\\.)*)\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\))?)"
                   r"(?:\s+\"[^\"]*\")?\s*\)")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EM_STAR = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_EM_UNDER = re.compile(r"(?<![\w])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w])")
_ESCAPABLE = "\\`*_{}[]()#+-.!|<>~"


def link_kind(target: str) -> str:
    r"""``refused``, ``external``, ``anchor`` or ``relative``: how a link target is treated.

    Control characters and whitespace are removed before the scheme is read, as browsers do, so
    ``java\tscript:`` is refused as well.
    """
    squeezed = re.sub(r"[\x00-\x20\x7f]+", "", html.unescape(target)).lower()
    match = _SCHEME.match(squeezed)
    if match:
        return "refused" if match.group(1) in REFUSED_SCHEMES else "external"
    if squeezed.startswith("//") or squeezed.startswith("\\\\"):
        return "external"
    if squeezed.startswith("#"):
        return "anchor"
    return "relative"


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _unescape_md(text: str) -> str:
    r"""Drops Markdown's backslash escapes (``\*`` -> ``*``)."""
    return re.sub(r"\\([" + re.escape(_ESCAPABLE) + "])", r"\1", text)


class _Renderer:
    """One rendering: block structure, then inline spans; ``link`` resolves relative targets."""

    def __init__(self, link: LinkResolver | None, heading_offset: int) -> None:
        self.link = link
        self.offset = heading_offset

    # --- inline ---------------------------------------------------------------------------

    def inline(self, text: str, *, links: bool = True) -> str:
        """Inline Markdown of one block's text as escaped HTML (code spans, links, emphasis)."""
        out, pos = [], 0
        for match in re.finditer(r"(?<!\\)(`+)(.+?)(?<!`)\1(?!`)", text, re.S):
            out.append(self._spans(text[pos : match.start()], links))
            out.append(f"<code>{_esc(match.group(2).strip())}</code>")
            pos = match.end()
        out.append(self._spans(text[pos:], links))
        return "".join(out)

    def _spans(self, text: str, links: bool) -> str:
        out, pos = [], 0
        if links:
            for match in _LINK.finditer(text):
                out.append(self._emphasis(text[pos : match.start()]))
                out.append(self._link(match.group(1) == "!", match.group(2), match.group(3)))
                pos = match.end()
        out.append(self._emphasis(text[pos:]))
        return "".join(out)

    def _emphasis(self, text: str) -> str:
        # Escapes are resolved on the raw text, then everything is escaped; the emphasis marks
        # survive escaping unchanged (html.escape leaves * and _ alone), so the tags added
        # below are the only markup in the result.
        protected = re.sub(
            r"\\([" + re.escape(_ESCAPABLE) + "])",
            lambda m: f"\x00{ord(m.group(1))}\x00",
            text,
        )
        out = _esc(protected.replace("\n", " "))
        out = _STRONG.sub(r"<strong>\2</strong>", out)
        out = _EM_STAR.sub(r"<em>\1</em>", out)
        out = _EM_UNDER.sub(r"<em>\1</em>", out)
        return re.sub(r"\x00(\d+)\x00", lambda m: _esc(chr(int(m.group(1)))), out)

    def _link(self, image: bool, label: str, target: str) -> str:
        target = _unescape_md(target.strip().removeprefix("<").removesuffix(">"))
        shown = self.inline(label, links=False) if label.strip() else _esc(target)
        if image:
            return f'<span class="image-alt">[image: {shown}]</span>'
        kind = link_kind(target)
        if kind == "refused":
            return f'{shown} <span class="refused-link">(link refused)</span>'
        if kind == "external":
            return (
                f'<span class="external">{shown} (external link: <code>{_esc(target)}</code>)'
                "</span>"
            )
        href = self.link(target) if self.link is not None and kind == "relative" else None
        if href is not None and link_kind(href) == "relative":
            return f'<a href="{_esc(href)}">{shown}</a>'
        return f'{shown} (<code>{_esc(target)}</code>)'

    # --- blocks ---------------------------------------------------------------------------

    def blocks(self, lines: list[str]) -> list[str]:
        """HTML blocks of ``lines`` (a whole document, a list item or a quote's content)."""
        out: list[str] = []
        i, n = 0, len(lines)
        while i < n:
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            if fence := _FENCE.match(line):
                i = self._code(lines, i, fence, out)
            elif heading := _HEADING.match(line.strip()):
                level = min(6, len(heading.group(1)) + self.offset)
                out.append(f"<h{level}>{self.inline(heading.group(2))}</h{level}>")
                i += 1
            elif _RULE.match(line):
                out.append("<hr>")
                i += 1
            elif line.lstrip().startswith(">"):
                quoted = []
                while i < n and lines[i].lstrip().startswith(">"):
                    quoted.append(re.sub(r"^\s*> ?", "", lines[i]))
                    i += 1
                out.append("<blockquote>" + "\n".join(self.blocks(quoted)) + "</blockquote>")
            elif _ITEM.match(line):
                i = self._list(lines, i, out)
            elif "|" in line and i + 1 < n and _TABLE_SEP.match(lines[i + 1]):
                i = self._table(lines, i, out)
            else:
                para = [line.strip()]
                i += 1
                while i < n and lines[i].strip() and not self._starts_block(lines, i):
                    para.append(lines[i].strip())
                    i += 1
                out.append(f"<p>{self.inline(chr(10).join(para))}</p>")
        return out

    def _starts_block(self, lines: list[str], i: int) -> bool:
        line = lines[i]
        return bool(
            _FENCE.match(line)
            or _HEADING.match(line.strip())
            or _RULE.match(line)
            or line.lstrip().startswith(">")
            or _ITEM.match(line)
            or ("|" in line and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]))
        )

    def _code(self, lines: list[str], i: int, fence: re.Match, out: list[str]) -> int:
        indent, mark = len(fence.group(1)), fence.group(2)
        lang = fence.group(3).strip().split(" ")[0]
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(mark):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i].lstrip())
            i += 1
        cls = f' class="language-{_esc(lang)}"' if re.fullmatch(r"[\w+.-]{1,30}", lang) else ""
        out.append(f"<pre><code{cls}>{_esc(chr(10).join(body))}</code></pre>")
        return i + 1

    def _list(self, lines: list[str], i: int, out: list[str]) -> int:
        first = _ITEM.match(lines[i])
        assert first is not None
        base = len(first.group(1))
        ordered = first.group(2)[0].isdigit()
        items: list[list[str]] = []
        n = len(lines)
        while i < n:
            line = lines[i]
            item = _ITEM.match(line)
            if item and len(item.group(1)) == base and item.group(2)[0].isdigit() == ordered:
                width = len(item.group(1)) + len(item.group(2)) + 1
                items.append([item.group(3)])
                i += 1
                continue
            if not line.strip():
                nxt = next((lines[j] for j in range(i + 1, n) if lines[j].strip()), "")
                if nxt and (len(nxt) - len(nxt.lstrip())) > base:
                    items[-1].append("")
                    i += 1
                    continue
                break
            indent = len(line) - len(line.lstrip())
            if indent > base or (not item and not self._starts_block(lines, i)):
                items[-1].append(line[min(indent, width) :] if indent > base else line.strip())
                i += 1
                continue
            break
        tag = "ol" if ordered else "ul"
        start = ""
        if ordered:
            number = int(re.match(r"\d+", first.group(2)).group(0))  # type: ignore[union-attr]
            start = f' start="{number}"' if number != 1 else ""
        body = []
        for item_lines in items:
            inner = self.blocks(item_lines)
            if len(inner) >= 1 and inner[0].startswith("<p>") and "" not in item_lines:
                inner[0] = inner[0][3:-4]  # a tight item: no paragraph around its first text
            body.append("<li>" + "\n".join(inner) + "</li>")
        out.append(f"<{tag}{start}>\n" + "\n".join(body) + f"\n</{tag}>")
        return i

    def _table(self, lines: list[str], i: int, out: list[str]) -> int:
        head = _cells(lines[i])
        aligns = []
        for cell in _cells(lines[i + 1]):
            left, right = cell.startswith(":"), cell.endswith(":")
            aligns.append("center" if left and right else "right" if right else "")
        i += 2
        rows = []
        while i < len(lines) and "|" in lines[i] and lines[i].strip():
            rows.append(_cells(lines[i]))
            i += 1

        def cell(tag: str, k: int, text: str) -> str:
            align = aligns[k] if k < len(aligns) else ""
            style = f' class="{align}"' if align else ""
            return f"<{tag}{style}>{self.inline(text)}</{tag}>"

        html_rows = ["<tr>" + "".join(cell("th", k, c) for k, c in enumerate(head)) + "</tr>"]
        for row in rows:
            row = (row + [""] * len(head))[: len(head)]
            tds = "".join(cell("td", k, c) for k, c in enumerate(row))
            html_rows.append(f"<tr>{tds}</tr>")
        out.append(
            '<table class="md">\n<thead>' + html_rows[0] + "</thead>\n<tbody>\n"
            + "\n".join(html_rows[1:]) + "\n</tbody>\n</table>"
        )
        return i


def _cells(line: str) -> list[str]:
    r"""A pipe-table row's cells (``\|`` is a literal bar; outer bars optional)."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    cells, cur, k = [], [], 0
    while k < len(text):
        ch = text[k]
        if ch == "\\" and k + 1 < len(text) and text[k + 1] == "|":
            cur.append("|")
            k += 2
            continue
        if ch == "|":
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        k += 1
    cells.append("".join(cur).strip())
    return cells


def render_markdown(
    text: str, link: LinkResolver | None = None, *, heading_offset: int = 1
) -> str:
    """``text`` (Markdown) as safe HTML: every character of the input is escaped or markup.

    Args:
        text: The Markdown source (untrusted).
        link: Maps a relative link target to an href inside the site (None: not carried).
        heading_offset: Added to each heading's level (a README's ``#`` sits under the page's
            own ``<h1>``), capped at 6.
    """
    text = text.replace("\x00", "\ufffd")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ").split("\n")
    return "\n".join(_Renderer(link, heading_offset).blocks(lines)) + "\n"
