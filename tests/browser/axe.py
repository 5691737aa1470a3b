"""The accessibility check of the browser tests: axe-core (its JavaScript as bundled by the
``axe-playwright-python`` package, pinned in pyproject.toml's dev extra) injected into a page
and run there, its violations of the given impacts returned."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page

IMPACTS = ("minor", "moderate", "serious", "critical")  # axe-core's, least to most severe


def axe_violations(
    page: Page, *, impacts: Iterable[str] = ("serious", "critical")
) -> list[dict[str, Any]]:
    """Run axe-core on ``page`` as it stands now and return its violations of ``impacts``, each
    as ``{"id", "impact", "help", "help_url", "targets"}``: ``targets`` holds one CSS selector per
    offending element (a selector into a frame or a shadow root is joined with ``" >> "``).
    ``assert axe_violations(page) == []`` is the check; its diff names the rules and elements."""
    wanted = set(impacts)
    unknown = wanted - set(IMPACTS)
    if unknown:
        raise ValueError(f"unknown axe impacts {sorted(unknown)}; axe-core's are {IMPACTS}")
    results = Axe().run(page, options={"resultTypes": ["violations"]}).response
    return [
        {
            "id": violation["id"],
            "impact": violation["impact"],
            "help": violation["help"],
            "help_url": violation["helpUrl"],
            "targets": [" >> ".join(map(str, node["target"])) for node in violation["nodes"]],
        }
        for violation in results["violations"]
        if violation["impact"] in wanted
    ]
