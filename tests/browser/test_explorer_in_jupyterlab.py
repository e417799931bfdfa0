"""What a learner sees: notebook 02 in JupyterLab in a real (headless) Chromium.

Runs every cell but the last, checks the widgets rendered, changes the
message size and the algorithm in the explorer, presses Run, waits for the
new measurement in the table and the plot, then runs the last cell (which
stops the engines) and checks that no engine process is left. Screenshots go
to GPULAB_SCREENSHOTS (default: the test's tmp dir).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.browser.lab import CHROMIUM_ARGS, Lab, ensure_chromium

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
RUN_TIMEOUT_MS = int(os.environ.get("GPULAB_BROWSER_TIMEOUT_MS", 240_000))  # the notebook's own cells: engines start (~10 s) and a first sweep
# Console noise that is not the kit's: the offline machine's failed fetches of news/extension lists
IGNORED_CONSOLE = re.compile(r"Failed to load resource|net::ERR_|favicon|pypi|news|Content Security Policy", re.I)


@pytest.fixture(scope="module")
def chromium():
    path = ensure_chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium could not be installed; the browser test must run in CI")
        pytest.skip("Chromium is not installed and cannot be installed on this machine")
    pytest.importorskip("playwright.sync_api")
    return path


def _menu(page, *path: str) -> None:
    page.get_by_role("menuitem", name=path[0], exact=True).first.click()
    for name in path[1:]:
        page.get_by_role("menuitem", name=re.compile(rf"^{re.escape(name)}")).first.click()


def _text(locator) -> str:
    return locator.inner_text(timeout=5_000)


def test_broadcast_explorer_measures_in_the_browser(chromium, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    shots = Path(os.environ.get("GPULAB_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    console_errors = []
    with Lab(tmp_path, NOTEBOOKS) as lab, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda msg: msg.type == "error" and console_errors.append(msg.text))
        page.on("pageerror", lambda err: console_errors.append(f"page error: {err}"))
        try:
            page.goto(lab.url("02_broadcast_explorer.ipynb"))
            cells = page.locator(".jp-NotebookPanel:visible .jp-Cell")
            expect(cells.last).to_be_visible(timeout=60_000)
            # the kernel must be up before "run" means anything
            expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=120_000)

            # everything but the last cell, which stops the engines
            cells.last.click()
            _menu(page, "Run", "Run All Above Selected Cell")
            explorer = page.locator(".widget-vbox:has(button:has-text('Run'))").first
            expect(explorer).to_be_visible(timeout=RUN_TIMEOUT_MS)
            expect(page.get_by_text("on 4 ranks the chain")).to_be_visible(timeout=RUN_TIMEOUT_MS)
            expect(page.locator(".jp-InputPrompt:has-text('[*]')")).to_have_count(0, timeout=RUN_TIMEOUT_MS)
            assert not page.get_by_text("Error displaying widget").count()
            assert not page.get_by_text("Loading widget").count()
            assert lab.descendants(), "the notebook should have started MPI engines"
            rows_before = explorer.locator("table tr").count()
            image_before = explorer.locator(".widget-output img").first.get_attribute("src")
            page.screenshot(path=str(shots / "explorer_before.png"), full_page=False)

            # a new measurement: one size (the upper handle to the lower one) and another algorithm
            explorer.locator("select").first.select_option(["scatter_allgather_ring"])
            upper = explorer.locator(".noUi-handle-upper").first
            upper.focus()
            for _ in range(3):
                upper.press("ArrowLeft")
            status = explorer.locator(".widget-html").first
            explorer.locator("button:has-text('Run')").first.click()
            expect(status).to_contain_text("run #2", timeout=30_000)
            expect(status).to_contain_text("measurements done", timeout=RUN_TIMEOUT_MS)
            table = _text(explorer.locator("table").first)
            assert "scatter_allgather_ring" in table, table
            assert explorer.locator("table tr").count() > 1
            assert explorer.locator(".widget-output img").first.get_attribute("src") != image_before
            assert rows_before >= 1
            explorer.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "explorer_after.png"), full_page=False)

            # the last cell stops the engines
            cells.last.click()
            page.keyboard.press("Shift+Enter")
            deadline = time.monotonic() + 60
            while lab.descendants() and time.monotonic() < deadline:
                time.sleep(1)
            assert not lab.descendants(), f"engines left running: {lab.descendants()}"
        except Exception:
            page.screenshot(path=str(shots / "explorer_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    kit_errors = [e for e in console_errors if not IGNORED_CONSOLE.search(e)]
    assert not kit_errors, f"browser console errors: {kit_errors}"
