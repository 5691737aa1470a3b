"""Screenshots for the documentation: the console's pictures under docs/assets/console/ are
taken by the browser tests (``shot(page, "name")``), so a test run refreshes them."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "assets" / "console"


def shot(page: Page, name: str, *, directory: Path = SCREENSHOTS, full_page: bool = False) -> Path:
    """Save a PNG of ``page`` (its viewport, or the whole page with ``full_page``) as
    ``<directory>/<name>.png``, creating the directory; return the file's path. Animations are
    stopped and the caret hidden, so the same page gives the same picture."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        raise ValueError(f"screenshot name {name!r}: lower-case letters, digits, - and _ only")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    page.screenshot(path=path, full_page=full_page, animations="disabled", caret="hide")
    return path
