"""A report written once and rendered twice: Markdown (report.md) and one self-contained HTML page
(report.html: styles inline, figures embedded as data URIs, nothing fetched from the network)."""

import base64
import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

DASH = "–"  # where no number can exist (one seed: no interval); explained under each table that has one


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # never "-0.00"


def fmt_p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return DASH
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.1rem; margin-top: 1.5rem; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #555; } code { background: #f3f3f3; padding: 0 0.2rem; }
pre { background: #f3f3f3; padding: 0.6rem; overflow-x: auto; } pre code { padding: 0; }
"""

# after loading, the page records how many figures decoded (a headless browser test reads it back)
CHECK_SCRIPT = """
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const ok = images.filter((img) => img.complete && img.naturalWidth > 0).length;
  document.body.dataset.figures = String(images.length);
  document.body.dataset.figuresRendered = String(ok);
  document.body.dataset.tables = String(document.querySelectorAll("table").length);
});
"""

_CODE = re.compile(r"`([^`]+)`")
_MARKERS = re.compile(r"([\\`*\[<~])")  # what Markdown (and _inline) would read as markup
# an underscore opens or closes emphasis in Markdown only at a word's edge (/_tmp_/, not max_epochs)
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_ESCAPED = re.compile(r"\\([\\`*\[<~_])")
_KEPT = re.compile("\x00(\\d+)\x00")

_STRONG = re.compile(r"\*\*([^*]+)\*\*")
_EMPHASIS = re.compile(r"\*([^*\s][^*]*)\*")


def cell_name(pairs) -> str:
    """A cell of a sweep, ``(factor, level)`` pairs, as a paragraph names it: ``pos=rope, norm=rms``."""
    return ", ".join(f"{factor}={literal(level)}" for factor, level in pairs)


def literal(text) -> str:
    """Text from the runs (a level, a sentence, a path) to read as written in a paragraph, in both renderings:
    its markup characters escaped (a level st*ar*s was shown as st<em>ar</em>s). Table cells are literal
    without it."""
    return _EDGE_UNDERSCORE.sub(r"\\_", _MARKERS.sub(r"\\\1", str(text)))


@dataclass
class Document:
    title: str
    blocks: list[tuple] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("heading", level, text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("paragraph", text))

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        """Cells are shown as written, no markup read in them: they hold levels, paths and outputs."""
        self.blocks.append(("table", [str(h) for h in header], [[str(c) for c in row] for row in rows]))

    def items(self, texts: list[str]) -> None:
        """A list, each item a paragraph's text (its data through :func:`literal`)."""
        self.blocks.append(("items", list(texts)))

    def code(self, lines: list[str]) -> None:
        """Commands to copy, shown as written (no markup read in them)."""
        self.blocks.append(("code", list(lines)))

    def figure(self, path: Path, caption: str) -> None:
        """A PNG beside the report (linked from Markdown, embedded in HTML)."""
        self.blocks.append(("figure", Path(path), caption))

    # ---- rendering -----------------------------------------------------------------------------
    def markdown(self) -> str:
        lines = [f"# {literal(self.title)}", ""]
        for block in self.blocks:
            kind = block[0]
            if kind == "heading":
                lines += ["#" * block[1] + " " + block[2], ""]
            elif kind == "paragraph":
                lines += [block[1], ""]
            elif kind == "table":
                header, rows = block[1], block[2]
                lines.append("| " + " | ".join(_md_cell(literal(h)) for h in header) + " |")
                lines.append("|---" * len(header) + "|")
                lines += ["| " + " | ".join(_md_cell(literal(c)) for c in row) + " |" for row in rows]
                lines.append("")
            elif kind == "items":
                lines += [*(f"- {text}" for text in block[1]), ""]
            elif kind == "code":
                lines += [*(f"    {line}" for line in block[1]), ""]
            elif kind == "figure":
                lines += [f"![{block[2]}]({block[1].name})", ""]
        return "\n".join(lines)

    def html(self) -> str:
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(self.title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for block in self.blocks:
            kind = block[0]
            if kind == "heading":
                parts.append(f"<h{block[1]}>{_inline(block[2])}</h{block[1]}>")
            elif kind == "paragraph":
                parts.append(f"<p>{_inline(block[1])}</p>")
            elif kind == "table":
                head = "".join(f"<th>{html.escape(h, quote=False)}</th>" for h in block[1])
                body = "".join(
                    "<tr>" + "".join(f"<td>{html.escape(c, quote=False)}</td>" for c in row) + "</tr>"
                    for row in block[2]
                )
                parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            elif kind == "items":
                parts.append("<ul>" + "".join(f"<li>{_inline(text)}</li>" for text in block[1]) + "</ul>")
            elif kind == "code":
                parts.append("<pre><code>" + html.escape("\n".join(block[1]), quote=False) + "</code></pre>")
            elif kind == "figure":
                data = base64.b64encode(block[1].read_bytes()).decode("ascii")
                parts.append(
                    f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{_inline(block[2])}</figcaption></figure>"
                )
        parts.append(f"<script>{CHECK_SCRIPT}</script></body></html>")
        return "\n".join(parts) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _inline(text: str) -> str:
    """Escaped text with `code` spans, **strong** and *emphasised* words; a character escaped by
    :func:`literal` is shown as itself."""
    kept: list[str] = []

    def keep(match: re.Match) -> str:
        kept.append(match.group(1))
        return f"\x00{len(kept) - 1}\x00"

    text = html.escape(_ESCAPED.sub(keep, text), quote=False)
    text = _CODE.sub(r"<code>\1</code>", text)
    text = _EMPHASIS.sub(r"<em>\1</em>", _STRONG.sub(r"<strong>\1</strong>", text))
    return _KEPT.sub(lambda m: html.escape(kept[int(m.group(1))], quote=False), text)
