"""Text for the generated reference pages: table cells that survive Markdown."""

from __future__ import annotations

import re
from collections.abc import Sequence

_CODE_SPAN = re.compile(r"(`[^`]*`)")


def cell(text: str) -> str:
    """``text`` as one table cell: ``|`` escaped, line breaks kept as ``<br>``, and ``<``/``>``
    escaped outside code spans (``<role>.password`` is text, not an HTML tag)."""
    parts = _CODE_SPAN.split(text.strip())
    out = [
        part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    ]
    return "".join(out).replace("|", "\\|").replace("\n", "<br>")


def code(text: str) -> str:
    """``text`` as an inline code span (a table keeps the pipes inside it)."""
    ticks = "``" if "`" in text else "`"
    return f"{ticks}{text}{ticks}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
