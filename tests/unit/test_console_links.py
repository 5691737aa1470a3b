"""Where the console sends a user after signing in: a local path only. Browsers read a
backslash as a slash and drop tabs and newlines from a URL, so each of those could turn a path
into another site."""

from __future__ import annotations

import pytest

from outboxkit.console.site import safe_next


@pytest.mark.parametrize("kept", ["/", "/failures?consumer=c&hours=1", "/records/c/1#top"])
def test_a_local_path_is_kept(kept: str) -> None:
    assert safe_next(kept) == kept


@pytest.mark.parametrize(
    "refused",
    ["//evil.example", "/\\evil.example", "\\\\evil.example", "/\t/evil.example",
     "/\n/evil.example", "https://evil.example", "javascript:alert(1)", ""],
)  # fmt: skip
def test_anything_else_goes_to_the_overview(refused: str) -> None:
    assert safe_next(refused) == "/"
