"""The browser harness itself: the system Chromium renders a page served on loopback, a click
runs the page's script, axe-core finds a real violation (the check can fail) and passes once it
is fixed, and a screenshot is a PNG."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import axe_violations
from tests.browser.shots import shot

PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Harness</title></head>
<body>
<main>
  <h1>Harness</h1>
  <p id="status">waiting</p>
  <button type="button" onclick="document.getElementById('status').textContent = 'clicked'">
    Press
  </button>
  {field}
</main>
</body>
</html>
"""
PAGES = {
    "/unlabelled": PAGE.format(field='<input type="text" id="name">'),
    "/labelled": PAGE.format(field='<label for="name">Name</label> <input type="text" id="name">'),
}


class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # no request log in the test output


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The pages above, served on a free loopback port for the module."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, name="harness-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_page_renders_and_a_click_runs_its_script(page: Page, site: str) -> None:
    page.goto(f"{site}/unlabelled")
    expect(page).to_have_title("Harness")
    expect(page.get_by_role("heading", name="Harness")).to_be_visible()
    expect(page.locator("#status")).to_have_text("waiting")
    page.get_by_role("button", name="Press").click()
    expect(page.locator("#status")).to_have_text("clicked")
    assert page.viewport_size == {"width": 1280, "height": 800}


def test_axe_finds_an_unlabelled_input(page: Page, site: str) -> None:
    page.goto(f"{site}/unlabelled")
    violations = axe_violations(page)
    assert [(v["id"], v["impact"], v["targets"]) for v in violations] == [
        ("label", "critical", ["#name"])
    ]
    assert "label" in violations[0]["help"].lower()


def test_axe_passes_once_the_input_is_labelled(page: Page, site: str) -> None:
    page.goto(f"{site}/labelled")
    assert axe_violations(page, impacts=("minor", "moderate", "serious", "critical")) == []


def test_axe_rejects_an_unknown_impact(page: Page) -> None:
    with pytest.raises(ValueError, match="unknown axe impacts"):
        axe_violations(page, impacts=("severe",))


@pytest.mark.parametrize("viewport", [{"width": 400, "height": 300}])
def test_shot_saves_a_png_of_the_viewport(page: Page, site: str, tmp_path: Path) -> None:
    page.goto(f"{site}/labelled")
    path = shot(page, "harness", directory=tmp_path / "console")
    data = path.read_bytes()
    assert path == tmp_path / "console" / "harness.png"
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (400, 300)
    with pytest.raises(ValueError, match="screenshot name"):
        shot(page, "../escape", directory=tmp_path)
