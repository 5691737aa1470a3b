"""Browser tests: the machine's Chromium (Debian's ``chromium``, installed by
scripts/install-system.sh) driven headless through Playwright's sync API, with no browser
download of Playwright's own. Every test here is marked ``browser``. The browser is shared by
the session and stopped after the last test that uses it (as tests/conftest.py does with the
stack): idle, it would hold memory through the rest of the suite.

Playwright is pinned (pyproject.toml's dev extra) to the release built for the Chromium major
that Debian ships (1.64.1: Chromium 156); when Debian's chromium moves several majors ahead, move
the pin with it. Helpers: ``tests.browser.axe.axe_violations`` (the accessibility check) and
``tests.browser.shots.shot`` (the docs' screenshots)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

HERE = Path(__file__).resolve().parent
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 10_000  # a missing element fails the test in 10 s, not Playwright's 30
_running: list[contextlib.ExitStack] = []  # the session browser's Playwright, while it runs
_last_user: list[str] = []  # node id of the last test (in run order) using `browser`


@pytest.hookimpl(tryfirst=True)  # before -m is evaluated: it must see the marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents and item.get_closest_marker("browser") is None:
            item.add_marker("browser")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note the last test (in run order, after deselection) that uses `browser`."""
    names = {item.nodeid: getattr(item, "fixturenames", ()) for item in session.items}
    users = [nodeid for nodeid, fixtures in names.items() if "browser" in fixtures]
    _last_user[:] = users[-1:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test using `browser` (its page and context closed), stop the browser."""
    yield
    if _last_user == [item.nodeid] and _running:
        _running.pop().close()


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(
            "no `chromium` on PATH: the browser tests drive Debian's chromium package, which "
            "scripts/install-system.sh installs (run the tests through `./dev.sh test`, or run "
            "`bash scripts/install-system.sh` once)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium for the session. Playwright launches it with --no-sandbox unless told
    otherwise (chromium_sandbox), which running as root (CI) needs."""
    executable = chromium_path()
    with contextlib.ExitStack() as resources:
        _running.append(resources)
        playwright = resources.enter_context(sync_playwright())
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        resources.callback(launched.close)
        try:
            yield launched
        finally:
            if resources in _running:
                _running.remove(resources)


@pytest.fixture
def viewport() -> dict[str, int]:
    """The page's size; a test gives its own with ``@pytest.mark.parametrize("viewport", ...)``."""
    return dict(VIEWPORT)


@pytest.fixture
def page(browser: Browser, viewport: dict[str, int]) -> Iterator[Page]:
    """A page in a fresh context (no cookies or storage shared with other tests), set to render
    the same way each run: English, UTC, light colours, reduced motion, device scale 1."""
    options: dict[str, Any] = {
        "viewport": viewport,
        "device_scale_factor": 1,
        "locale": "en-US",
        "timezone_id": "UTC",
        "color_scheme": "light",
        "reduced_motion": "reduce",
    }
    context = browser.new_context(**options)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()
