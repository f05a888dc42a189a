"""One student in a real JupyterLab page, in headless Chromium (a thread of the bench's process drives it).

The student types their name and password into the hub's login page; the hub starts their server and the page
lands in JupyterLab; the notebook (the lesson's cells above exercise 1.1) is opened from the file browser's
URL; when the class presses "run", the student picks Run > Run All Cells from the menu bar and watches the page
until the lesson's "first cluster ready" line and the check's verdict appear, then saves with Ctrl+S. Only the
REST API's token (for putting the notebook in their home, as a teacher's distribution would) does not go
through the page. Needs the Python package ``playwright`` and a Chromium (Debian: ``apt-get install
chromium``); it never downloads a browser.

Example::

    browser_session(hub.url, row, password, notebook, go, timeout=900, chromium="/usr/bin/chromium")
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from hubbench.student import Student, StudentError, wait_for_class
from hubbench.workload import ASSIGNMENT, EXERCISE, READY_MARK, check_outcome

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """Chromium to drive: ``$DTFKIT_CHROMIUM``, else ``chromium`` on PATH (None when there is none)."""
    explicit = os.environ.get("DTFKIT_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> str | None:
    """Why a browser student cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return (
            "the Python package 'playwright' is not installed (pip install playwright; no browser download)"
        )
    if chromium() is None:
        if os.environ.get("DTFKIT_CHROMIUM"):
            return f"DTFKIT_CHROMIUM={os.environ['DTFKIT_CHROMIUM']} is not an executable file"
        return "no chromium executable on PATH (Debian: apt-get install chromium; or set DTFKIT_CHROMIUM)"
    return None


def with_lesson(notebook: dict[str, Any], lesson: list[str]) -> dict[str, Any]:
    """The notebook with the lesson's cells above the exercise (plain cells nbgrader does not grade)."""
    cells: list[dict[str, Any]] = [
        {"cell_type": "code", "metadata": {}, "source": code, "outputs": [], "execution_count": None}
        for code in lesson
    ]
    return {**notebook, "cells": cells + notebook["cells"]}


def browser_session(
    hub_url: str,
    row: Any,
    password: str,
    notebook: dict[str, Any],
    go: threading.Barrier,
    timeout: float,
    artifacts: Path | None = None,
) -> None:
    """A student's whole session through the page; fills ``row`` like the websocket students' sessions."""
    from playwright.sync_api import sync_playwright

    path = f"{ASSIGNMENT}.ipynb"
    rest = Student(hub_url, row.name, password)
    mark = f"exercise {EXERCISE}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        try:
            t0 = time.monotonic()
            rest.login()  # a token for putting the notebook in place, as a teacher's distribution would
            page.goto(f"{hub_url}/hub/login", timeout=120_000)
            page.fill("#username_input", row.name)
            page.fill("#password_input", password)
            page.click("#login_submit")
            page.wait_for_url(f"**/user/{row.name}/lab**", timeout=timeout * 1000)
            page.wait_for_selector(".jp-LabShell", timeout=timeout * 1000)
            row.server_s = time.monotonic() - t0
            rest.put_notebook(path, notebook)
            page.goto(f"{hub_url}/user/{row.name}/lab/tree/{path}", timeout=120_000)
            page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=timeout * 1000)
            _wait_kernel_idle(rest, page, timeout)
        except Exception as err:  # noqa: BLE001 (reported as this student's failure)
            row.failures.append(
                "browser: " + type(err).__name__ + ": " + (str(err).splitlines() or [""])[0][:120]
            )
            row.check_text = traceback.format_exc()[-800:]  # where it failed, for the report
            _save(page, artifacts, row.name, "failure")
            go.abort()
            browser.close()
            return
        if not wait_for_class(go, row.failures):
            browser.close()
            return
        pressed = time.monotonic()
        try:
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
            _wait_output(page, READY_MARK, timeout)
            row.first_cluster_s = time.monotonic() - pressed
            # The check shows its HTML box here: "✔ exercise 1.1 — <title>: passed" ("✔ 练习 1.1 — ..." in the
            # Chinese edition; the text form has "(title)").
            verdict = _wait_output(
                page, re.compile(rf"[✔✘] (?:exercise|练习) {re.escape(EXERCISE)}\b"), timeout
            )
            row.checked_s = time.monotonic() - pressed
            row.check_text = verdict.inner_text().strip()
            row.outcome = check_outcome(row.check_text)
            expected = "failed" if row.wrong_answer else "passed"
            if row.outcome != expected:
                row.failures.append(f"check said {row.outcome or 'nothing'}, expected {expected}")
            _dismiss_news(page)
            verdict.scroll_into_view_if_needed()
            _save(page, artifacts, row.name, "checked")
            page.keyboard.press("Control+s")
            saved = _wait_saved(rest, page, path, mark, timeout=120)
            for cell in saved["cells"]:
                for out in cell.get("outputs", []):
                    for line in "".join(out.get("text", "")).splitlines():
                        if line.startswith("dtfkit-bench-cluster "):
                            probe = json.loads(line.split(" ", 1)[1])
                            row.isolated, row.addresses = probe["isolated"], probe["addresses"]
            row.notebook = os.path.join(os.path.expanduser(f"~{row.name}"), path)
        except Exception as err:  # noqa: BLE001
            row.failures.append(
                "browser: " + type(err).__name__ + ": " + (str(err).splitlines() or [""])[0][:120]
            )
            _save(page, artifacts, row.name, "failure")
        finally:
            browser.close()
            rest.close()


_PROMPTS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
    .map(e => e.textContent.trim())"""


def _wait_output(page: Any, text: str | re.Pattern, timeout: float) -> Any:
    """The first cell output showing ``text``; fails early when Run All has finished without it."""
    found = page.locator(".jp-OutputArea-output", has_text=text).first
    deadline = time.monotonic() + timeout
    idle_polls = 0
    while not found.count():
        prompts = page.evaluate(_PROMPTS_JS)
        busy = any("*" in p for p in prompts) or not all(p[1:-2].isdigit() for p in prompts)
        idle_polls = 0 if busy else idle_polls + 1
        if idle_polls >= 20:  # 10 s with every cell run and none running: the output will not come
            raise RuntimeError(f"every cell ran and no output shows {text!r}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no output shows {text!r} after {timeout:.0f} s (prompts {prompts})")
        page.wait_for_timeout(500)
    return found


def _dismiss_news(page: Any) -> None:
    """Answer JupyterLab's one-time "notified about Jupyter news?" toast with No, as a student would."""
    toast = page.get_by_text("Would you like to get notified about official Jupyter news?")
    if toast.count():
        page.get_by_role("button", name="No", exact=True).first.click()


def _wait_kernel_idle(rest: Student, page: Any, timeout: float) -> None:
    """Until the server reports the notebook's kernel connected and idle (a Run All before that is lost)."""
    deadline = time.monotonic() + timeout
    while True:
        # Not always the list: while the server or its proxy route settles, the hub can answer for it with a JSON
        # error object (seen once in CI), which is read as "not yet" and shown if it never becomes a list.
        answer = rest.server("GET", "/api/kernels")
        kernels = _json_or_text(answer)
        if answer.ok and isinstance(kernels, list):
            if any(k.get("connections", 0) >= 1 and k.get("execution_state") == "idle" for k in kernels):
                return
        else:
            kernels = f"HTTP {answer.status_code}: {str(kernels)[:300]}"
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        if dialog.count() and dialog.first.is_visible():
            dialog.first.locator(".jp-mod-accept").click()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no connected idle kernel within {timeout:.0f} s: {kernels}")
        page.wait_for_timeout(250)


def _json_or_text(answer: Any) -> Any:
    """The answer's JSON, or its text when it is not JSON (a proxy's HTML error page)."""
    try:
        return answer.json()
    except ValueError:
        return answer.text


def _wait_saved(rest: Student, page: Any, path: str, mark: str, timeout: float) -> dict[str, Any]:
    """Until the page says the notebook is saved (its tab no longer dirty) and the file holds the verdict."""
    deadline = time.monotonic() + timeout
    seen = "nothing read yet"
    try:
        page.wait_for_function(
            "() => !document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')",
            timeout=timeout * 1000,
        )
    except Exception as err:  # noqa: BLE001 (explained below, with whatever dialog the page shows)
        dialog = page.locator(".jp-Dialog")
        shown = dialog.first.inner_text()[:300] if dialog.count() else "no dialog"
        raise TimeoutError(f"JupyterLab did not finish saving {path} ({shown}): {err}") from err
    while time.monotonic() < deadline:
        try:
            nb = rest.get_notebook(path)
        except StudentError as err:  # read while the server was writing it: read again
            seen = str(err)[:300]
            nb = {"cells": []}
        else:
            seen = f"{len(nb['cells'])} cells, no output with {mark!r}"
        text = str([c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"])
        if check_outcome(text) or mark in text:  # the check's verdict, in either edition
            return nb
        time.sleep(0.5)  # poll: the contents API has no "saved" event to wait on
    raise TimeoutError(f"{path} was saved but not with the check's output within {timeout:.0f} s: {seen}")


def _save(page: Any, folder: Path | None, name: str, what: str) -> None:
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"classroom-{name}-{what}.png"))
    except Exception:  # noqa: BLE001 (a screenshot is a help, never a failure)
        pass
