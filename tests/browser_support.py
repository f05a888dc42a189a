"""Plumbing for the end-to-end browser tests: a private JupyterLab server and headless Chromium.

The browser is Debian's ``chromium`` driven by the Python ``playwright`` package through
``executable_path`` (no browser download). ``.ci/run`` installs both and sets
``DTFKIT_REQUIRE_BROWSER=1``, which turns a missing one into a failure instead of a skip.

Example::

    chromium = require_browser()
    with JupyterLab(root=tmp_path / "nb", state=tmp_path / "jupyter", env=subprocess_env()) as lab:
        print(lab.url("lab/tree/notebook.ipynb"))
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hubbench import browser as hub_browser

REPO = Path(__file__).resolve().parents[1]
REQUIRE_ENV = "DTFKIT_REQUIRE_BROWSER"
ARTIFACTS_ENV = "DTFKIT_ARTIFACTS"
# The classroom bench drives the same Chromium the same way (hubbench/browser.py): one definition.
CHROMIUM_ENV = "DTFKIT_CHROMIUM"
CHROMIUM_ARGS = hub_browser.CHROMIUM_ARGS

# Every code cell's editor and outputs stay in the DOM (no windowing), so the test can read all prompts.
_LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "autoStartDefaultKernel": True,
    },
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


# ------------------------------------------------------------------ prerequisites
def chromium_executable() -> str | None:
    """The Chromium binary to drive: ``$DTFKIT_CHROMIUM``, else ``chromium`` on PATH."""
    return hub_browser.chromium()


def missing_browser_reason() -> str | None:
    """Why the browser test cannot run here, or None when playwright and chromium are present."""
    return hub_browser.missing()


def require_browser() -> str:
    """The Chromium path; skips the test when the browser is absent, or fails under DTFKIT_REQUIRE_BROWSER=1."""
    reason = missing_browser_reason()
    if reason is None:
        return str(chromium_executable())
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


def artifacts_dir() -> Path:
    """Where screenshots and failure reports go: ``$DTFKIT_ARTIFACTS`` or ``test-artifacts/`` (gitignored)."""
    path = Path(os.environ.get(ARTIFACTS_ENV) or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def strip_outputs(source: Path, target: Path) -> int:
    """Copy a notebook without outputs, execution counts, saved widget state, collapsed inputs or
    empty code cells; returns its code cell count.

    A fresh copy makes "every code cell has a prompt number" mean "this kernel ran it", and
    keeps saved (dead) widget views from standing in for the live panel. JupyterLab never
    numbers an empty code cell, so those are left out.
    """
    nb = json.loads(source.read_text())
    nb.get("metadata", {}).pop("widgets", None)
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            if not "".join(cell["source"]).strip():
                continue
            cell["outputs"] = []
            cell["execution_count"] = None
            # A collapsed input (check cells: source_hidden) shows no prompt to read the count from.
            cell.get("metadata", {}).get("jupyter", {}).pop("source_hidden", None)
        cells.append(cell)
    nb["cells"] = cells
    target.write_text(json.dumps(nb, indent=1))
    return sum(1 for cell in cells if cell["cell_type"] == "code")


# ------------------------------------------------------------------ committed screenshots
UPDATE_SCREENSHOTS_ENV = "DTFKIT_UPDATE_SCREENSHOTS"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A panel screenshot smaller than this shows too little to be the panel; larger is unreadable in a notebook.
SCREENSHOT_MIN_PIXELS = (400, 300)
SCREENSHOT_MAX_PIXELS = (4000, 6000)
SCREENSHOT_MAX_BYTES = 3 * 1024 * 1024


def update_screenshots() -> bool:
    """True when ``$DTFKIT_UPDATE_SCREENSHOTS`` asks the browser tests to rewrite the committed screenshots."""
    return os.environ.get(UPDATE_SCREENSHOTS_ENV, "").strip().lower() in ("1", "true", "yes")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file, read from its IHDR chunk; raises ``ValueError`` for anything else."""
    head = path.read_bytes()[:24]
    if len(head) < 24 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file (its first bytes are {head[:16]!r})")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def screenshot_problem(path: Path) -> str | None:
    """Why ``path`` is not a usable committed screenshot (missing, not a PNG, odd size), or None."""
    if not path.is_file():
        return f"{path} is missing; make it with {UPDATE_SCREENSHOTS_ENV}=1 and the browser test"
    try:
        width, height = png_size(path)
    except ValueError as err:
        return str(err)
    (min_w, min_h), (max_w, max_h) = SCREENSHOT_MIN_PIXELS, SCREENSHOT_MAX_PIXELS
    if not (min_w <= width <= max_w and min_h <= height <= max_h):
        return f"{path} is {width}x{height} pixels, outside {min_w}x{min_h} .. {max_w}x{max_h}"
    size = path.stat().st_size
    if size > SCREENSHOT_MAX_BYTES:
        return f"{path} has {size} bytes, more than {SCREENSHOT_MAX_BYTES} (too heavy for a notebook image)"
    return None


# ------------------------------------------------------------------ the server
class JupyterLab:
    """``jupyter lab`` serving ``root`` on a free loopback port, without a token, with private Jupyter folders.

    Its config, data, runtime, settings and workspace folders live under ``state``, so it
    neither reads nor writes the user's; its output goes to ``state/jupyter.log``.
    Leaving the ``with`` block shuts every kernel down through the REST API, then
    terminates the server and waits for it.
    """

    def __init__(self, root: Path, state: Path, env: dict[str, str], start_timeout: float = 120.0):
        self.root = root
        self.start_timeout = start_timeout
        self.private = state
        self.log_path = state / "jupyter.log"
        self.env = dict(env)
        for var, sub in (
            ("JUPYTER_CONFIG_DIR", "config"),
            ("JUPYTER_DATA_DIR", "data"),
            ("JUPYTER_RUNTIME_DIR", "runtime"),
            ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
            ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"),
            ("IPYTHONDIR", "ipython"),
        ):
            folder = self.private / sub
            folder.mkdir(parents=True, exist_ok=True)
            self.env[var] = str(folder)
        self.env["JUPYTER_PLATFORM_DIRS"] = "1"
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._cookies = http.cookiejar.CookieJar()
        self._opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self._cookies))
        self._xsrf: str | None = None

    # -- lifecycle
    def __enter__(self) -> JupyterLab:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        for name, value in _LAB_SETTINGS.items():
            path = Path(self.env["JUPYTERLAB_SETTINGS_DIR"]) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",  # CI runs as root
            "--port=0",  # the OS picks a free port; the server's runtime file tells which
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            # Time for a kernel asked to shut down to close its clusters (atexit) before it is killed.
            "--KernelManager.shutdown_wait_time=30",
        ]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.root,
            )
        runtime_file = Path(self.env["JUPYTER_RUNTIME_DIR"]) / f"jpserver-{self.proc.pid}.json"
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.port is None and runtime_file.exists():
                try:
                    self.port = int(json.loads(runtime_file.read_text())["port"])
                except (ValueError, KeyError):
                    pass  # written but not complete yet
            if self.port is not None and self._answers():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"jupyter lab did not answer on /api/status within {self.start_timeout:g} s:\n"
                    + self.log_tail()
                )
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            self.api("GET", "api/status", timeout=5)
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                self.shutdown_kernels()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)

    # -- REST
    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def api(self, method: str, path: str, timeout: float = 30.0) -> object:
        """One REST call; non-GET calls carry the server's XSRF cookie and header."""
        headers = {"X-XSRFToken": self._xsrf_token()} if method != "GET" else {}
        request = urllib.request.Request(self.url(path), method=method, headers=headers)
        with self._opener.open(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def _xsrf_token(self) -> str:
        if self._xsrf is None:
            self._opener.open(self.url("lab"), timeout=30).read()  # sets the _xsrf cookie
            self._xsrf = next((c.value for c in self._cookies if c.name == "_xsrf"), None)
        if self._xsrf is None:
            raise RuntimeError("jupyter lab set no _xsrf cookie")
        return self._xsrf

    def kernels(self, starting: bool = False) -> list[dict]:
        """The server's kernels. ``starting=True``: while a kernel starts, jupyter_server can
        answer 500 (its ``last_activity`` is not set yet); that reads as no kernel yet."""
        try:
            return list(self.api("GET", "api/kernels"))  # type: ignore[arg-type]
        except urllib.error.HTTPError as err:
            if starting and err.code == 500:
                return []
            raise

    def shutdown_kernels(self, timeout: float = 60.0) -> None:
        """Shut every kernel down (a shutdown request first, so the kernel closes its clusters)."""
        for kernel in self.kernels():
            try:
                self.api("DELETE", f"api/kernels/{kernel['id']}", timeout=timeout)
            except urllib.error.HTTPError as err:
                if err.code != 404:  # 404: it was already gone
                    raise

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


# ------------------------------------------------------------------ the page
_PROMPTS_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
    .map(e => e.textContent.trim())"""
_TRACEBACKS_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output')]
    .map(e => e.innerText).filter(t => t.includes('Traceback') || /\\w+Error\\b/.test(t))"""


class LabPage:
    """A JupyterLab notebook tab in a playwright page, with bounded waits that explain a failure.

    Example::

        nb = LabPage(page, lab.url("lab/tree/08.ipynb"))
        nb.open(lab)
        nb.run_all_cells()
        nb.wait_all_cells_ran(code_cells=12, timeout=600)
    """

    def __init__(self, page, url: str):
        self.page = page
        self.url = url
        self.console: list[str] = []
        page.on("console", lambda msg: self.console.append(f"[{msg.type}] {msg.text}"))
        page.on("pageerror", lambda err: self.console.append(f"[pageerror] {err}"))

    def open(self, lab: JupyterLab, timeout: float = 180.0) -> None:
        """Load the notebook and wait until its kernel is connected and idle.

        The page's kernel indicator reads "idle" before any kernel exists, and a Run All
        issued before the kernel connects is dropped: so the server must also report a
        kernel with a connection, and then the page must show it idle.
        """
        deadline = time.monotonic() + timeout
        self.page.goto(self.url, timeout=timeout * 1000)
        self.page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=timeout * 1000)
        while not any(
            k["connections"] >= 1 and k["execution_state"] == "idle" for k in lab.kernels(starting=True)
        ):
            # autoStartDefaultKernel should prevent it; should the dialog still come, take its default.
            dialog = self.page.locator(".jp-Dialog", has_text="Select Kernel")
            if dialog.count() and dialog.first.is_visible():
                dialog.first.locator(".jp-mod-accept").click()
            if time.monotonic() > deadline:
                raise AssertionError(f"no connected idle kernel within {timeout:g} s: {lab.kernels()}")
            self.page.wait_for_timeout(250)
        remaining = max(1.0, deadline - time.monotonic())
        self.page.wait_for_selector(
            ".jp-Notebook-ExecutionIndicator[data-status='idle']", state="attached", timeout=remaining * 1000
        )

    def hide_left_sidebar(self) -> None:
        """Collapse the file browser (click its open tab), so screenshots show the notebook at full width."""
        current = ".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current"
        if self.page.locator(current).count():
            self.page.locator(current).first.click()
            self.page.wait_for_selector(current, state="detached")

    def run_all_cells(self, menu: str = "Run") -> None:
        """Run > Run All Cells, through the menu bar as a person would (``menu``: the Run menu's
        label in the interface's language, "运行" in Chinese)."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
        self.page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()

    def prompts(self) -> list[str]:
        return self.page.evaluate(_PROMPTS_JS)

    def kernel_status(self) -> str | None:
        return self.page.locator(".jp-Notebook-ExecutionIndicator").first.get_attribute("data-status")

    def wait_all_cells_ran(self, code_cells: int, timeout: float) -> None:
        """Wait until every code cell shows an execution count; fail early when Run All stopped."""
        deadline = time.monotonic() + timeout
        stopped_polls = 0
        while True:
            prompts = self.prompts()
            ran = sum(1 for p in prompts if p[1:-2].isdigit())
            if len(prompts) == code_cells and ran == code_cells:
                return
            # Idle with cells neither run nor queued: a cell raised and Run All gave up on the rest.
            stopped = "[*]:" not in prompts and self.kernel_status() == "idle" and ran < code_cells
            stopped_polls = stopped_polls + 1 if stopped else 0
            if stopped_polls >= 10:
                raise AssertionError(
                    f"Run All stopped after {ran} of {code_cells} code cells (prompts {prompts});"
                    f" tracebacks: {self.page.evaluate(_TRACEBACKS_JS)}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"after {timeout:g} s only {ran} of {code_cells} code cells ran (prompts {prompts})"
                )
            self.page.wait_for_timeout(500)

    def save_screenshot(self, path: Path) -> Path:
        self.page.screenshot(path=str(path))
        return path

    def save_failure(self, folder: Path, prefix: str, lab: JupyterLab | None = None) -> list[Path]:
        """Screenshot, page text, browser console and server log, for a CI reader to see what happened."""
        saved = []
        try:
            saved.append(self.save_screenshot(folder / f"{prefix}-failure.png"))
        except Exception as err:  # the page may be gone; the text files still help
            self.console.append(f"[test] screenshot failed: {err}")
        try:
            text = self.page.locator("body").inner_text(timeout=10_000)
        except Exception as err:
            text = f"(page text unavailable: {err})"
        for name, content in (
            ("failure-page.txt", text),
            ("failure-console.txt", "\n".join(self.console)),
            ("failure-jupyter.log", lab.log_tail(400) if lab else ""),
        ):
            path = folder / f"{prefix}-{name}"
            path.write_text(content)
            saved.append(path)
        return saved
