"""End to end in a real browser: JupyterLab runs chapter 8, a student switches the lab panel to async,
presses Run, and sees the plot and a new history row.

Headless Debian ``chromium`` driven by ``playwright`` (see ``browser_support``). The committed notebook
is never touched: a copy without outputs is served from a temporary folder by a private ``jupyter lab``.
Screenshots go to ``test-artifacts/`` (or ``$DTFKIT_ARTIFACTS``); on failure also the page text, the
browser console and the server log. With ``DTFKIT_UPDATE_SCREENSHOTS=1`` the panel's screenshot after the run
also replaces the committed ``notebooks/images/08_lab_panel.png`` (shown in chapter 8 for readers on GitHub and
nbviewer, where widgets do not render); otherwise the test checks that the committed one is a sane PNG.

A second test opens the Chinese chapter 8 in JupyterLab set to Chinese (its language pack), the kernel
started with ``DTFKIT_LANG=zh_CN``, and checks that the menus, the prose and the lab panel's words are
Chinese (screenshots ``lab-08-zh_CN-*.png``).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from browser_support import (
    CHROMIUM_ARGS,
    JupyterLab,
    LabPage,
    artifacts_dir,
    png_size,
    require_browser,
    screenshot_problem,
    strip_outputs,
    update_screenshots,
)
from conftest import REPO, subprocess_env

NOTEBOOK = REPO / "notebooks" / "08_sync_async_lab.ipynb"
COMMITTED_SCREENSHOT = REPO / "notebooks" / "images" / "08_lab_panel.png"
PREFIX = "lab-08"
# The chapter runs in about a minute alone; CI's 2 cores are shared, so every wait is generous but bounded.
RUN_ALL_TIMEOUT = 600.0
PANEL_TIMEOUT = 120.0
ASYNC_RUN_TIMEOUT = 300.0

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timing, pytest.mark.timeout(1800)]

_PANEL_STATE_JS = """(root) => {
    const status = root.querySelector('.dtfkit-lab-status');
    const img = root.querySelector('.dtfkit-lab-plot img');
    return {
        status: status ? status.innerText.trim() : null,
        rows: [...root.querySelectorAll('.dtfkit-lab-history tr.dtfkit-lab-row')].map(r => r.innerText.trim()),
        plot_img: img !== null && img.complete && img.naturalWidth > 0,
    };
}"""
_BUSY = ("starting", "running", "stopping")


def _panel_state(panel) -> dict:
    return panel.evaluate(_PANEL_STATE_JS)


def _wait_panel(nb: LabPage, panel, done, what: str, timeout: float) -> dict:
    """Poll the panel's state until ``done(state)``; fail early on an error status, or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        state = _panel_state(panel)
        if done(state):
            return state
        if re.match(r"(failed|stopped)", state["status"] or ""):
            raise AssertionError(f"the panel reports a failure while waiting for {what}: {state}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s; panel state: {state}")
        nb.page.wait_for_timeout(500)


def _async_run(lab: JupyterLab, nb: LabPage, code_cells: int, folder: Path) -> tuple[list[Path], str]:
    """Run the notebook, switch the panel to async, press Run, wait for the result; (screenshots, timings)."""
    t0 = time.monotonic()
    nb.open(lab)
    nb.hide_left_sidebar()
    nb.run_all_cells()
    nb.wait_all_cells_ran(code_cells, RUN_ALL_TIMEOUT)
    t_run_all = time.monotonic() - t0

    page = nb.page
    panel = page.locator(".jp-OutputArea-output").filter(has=page.locator(".dtfkit-lab-run")).first
    panel.wait_for(timeout=PANEL_TIMEOUT * 1000)
    # A run the notebook started may still be finishing; Run is meant for an idle panel.
    before = _wait_panel(
        nb, panel, lambda s: not (s["status"] or "").startswith(_BUSY), "an idle panel", ASYNC_RUN_TIMEOUT
    )

    async_button = panel.locator(".dtfkit-lab-mode button", has_text=re.compile(r"^\s*async\s*$"))
    async_button.click()
    page.wait_for_function(
        "(b) => b.classList.contains('mod-active')", arg=async_button.element_handle(), timeout=30_000
    )
    t1 = time.monotonic()
    panel.locator(".dtfkit-lab-run").click()
    after = _wait_panel(
        nb,
        panel,
        lambda s: (
            (s["status"] or "").startswith("finished")
            and len(s["rows"]) == len(before["rows"]) + 1
            and s["plot_img"]
        ),
        "finished async run with a new history row and a plot",
        ASYNC_RUN_TIMEOUT,
    )
    t_async = time.monotonic() - t1

    new_rows = [row for row in after["rows"] if row not in before["rows"]]
    assert len(new_rows) == 1 and "async" in new_rows[0], (before, after)
    panel.scroll_into_view_if_needed()
    shots = [nb.save_screenshot(folder / f"{PREFIX}-async.png")]
    panel.screenshot(path=str(folder / f"{PREFIX}-panel.png"))
    shots.append(folder / f"{PREFIX}-panel.png")
    timings = f"run all cells: {t_run_all:.0f} s; async run from the panel: {t_async:.0f} s; new row: {new_rows[0]!r}"
    return shots, timings


@contextlib.contextmanager
def _notebook_page(chromium: str, lab: JupyterLab, name: str, folder: Path, prefix: str, capsys):
    """A headless Chromium page on notebook ``name`` of ``lab``; on a failure inside the block, the page's
    artifacts (``prefix``) are saved to ``folder`` and named before the failure goes on."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            # Tall enough that the whole panel fits: element screenshots cannot scroll JupyterLab's panes.
            page = browser.new_page(viewport={"width": 1400, "height": 2000})
            nb = LabPage(page, lab.url(f"lab/tree/{name}"))
            try:
                yield nb
            except BaseException:
                saved = nb.save_failure(folder, prefix, lab)
                with capsys.disabled():
                    print("\nbrowser test failed; artifacts:", *saved, sep="\n  ")
                raise
        finally:
            browser.close()


def test_lab_panel_async_run_in_chromium(tmp_path, capsys):
    chromium = require_browser()

    assert NOTEBOOK.exists(), f"{NOTEBOOK} is missing"
    served = tmp_path / "notebooks"
    served.mkdir()
    code_cells = strip_outputs(NOTEBOOK, served / NOTEBOOK.name)
    folder = artifacts_dir()

    with JupyterLab(served, tmp_path / "jupyter", subprocess_env()) as lab:
        with _notebook_page(chromium, lab, NOTEBOOK.name, folder, PREFIX, capsys) as nb:
            shots, timings = _async_run(lab, nb, code_cells, folder)
        t_stop = time.monotonic()
    panel_shot = shots[-1]
    if update_screenshots():
        COMMITTED_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(panel_shot, COMMITTED_SCREENSHOT)
        shots.append(COMMITTED_SCREENSHOT)
    with capsys.disabled():
        print(f"\n{timings}; teardown: {time.monotonic() - t_stop:.0f} s")
        print("browser test screenshots:", *shots, sep="\n  ")
    # This run's panel screenshot must itself pass the check the committed one passes.
    assert screenshot_problem(panel_shot) is None, screenshot_problem(panel_shot)
    problem = screenshot_problem(COMMITTED_SCREENSHOT)
    assert problem is None, problem
    print("panel screenshot:", png_size(panel_shot), "committed:", png_size(COMMITTED_SCREENSHOT))


ZH_NOTEBOOK = REPO / "notebooks" / "zh_CN" / "08_sync_async_lab.ipynb"
ZH_PREFIX = "lab-08-zh_CN"
ZH_COMMITTED_SCREENSHOT = REPO / "notebooks" / "images" / "08_lab_panel.zh_CN.png"
# JupyterLab's own interface in Chinese: its language pack (the notebooks and test extras install it).
ZH_LAB_SETTINGS = ("@jupyterlab/translation-extension/plugin.jupyterlab-settings", {"locale": "zh_CN"})


# A wrong answer to exercise 8.1, run at the end of the Chinese chapter: synchronous updates wait for
# every worker (replicas_to_aggregate ignored). Its check fails before it starts anything.
WRONG_ANSWER = """# 一个错误的答案：同步模式下，每次更新都等齐所有 worker 的梯度
def predict(mode, workers, steps, replicas_to_aggregate):
    return {"global_step": steps, "per_update": workers, "applied": steps * workers}


check.ch08.predict_ledger(predict)"""


def test_the_chinese_chapter_and_its_lab_panel_in_a_chinese_jupyterlab(tmp_path, capsys):
    """The Chinese chapter 8 in JupyterLab set to Chinese, as a learner opens it: its first cell sets
    dtfkit's language. JupyterLab's menus, the chapter's prose, the lab panel's words and the feedback
    on a wrong answer are Chinese (screenshots in the artifacts, ``lab-08-zh_CN-*.png``)."""
    chromium = require_browser()

    fonts = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, check=False).stdout
    assert fonts.strip(), (
        "no font with Chinese: the screenshots would show boxes; apt-get install fonts-wqy-microhei"
    )
    served = tmp_path / "notebooks"
    served.mkdir()
    code_cells = strip_outputs(ZH_NOTEBOOK, served / ZH_NOTEBOOK.name) + 1
    copy = json.loads((served / ZH_NOTEBOOK.name).read_text())
    copy["cells"].append(
        {"cell_type": "code", "id": "wrong-answer", "metadata": {}, "execution_count": None, "outputs": []}
        | {"source": WRONG_ANSWER.splitlines(keepends=True)}
    )
    (served / ZH_NOTEBOOK.name).write_text(json.dumps(copy, indent=1))
    folder = artifacts_dir()
    env = subprocess_env()
    env.pop("DTFKIT_LANG", None)  # the chapter's first cell chooses the language, not the environment
    lab = JupyterLab(served, tmp_path / "jupyter", env)
    name, value = ZH_LAB_SETTINGS
    settings = Path(lab.env["JUPYTERLAB_SETTINGS_DIR"]) / name
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(value))

    with lab, _notebook_page(chromium, lab, ZH_NOTEBOOK.name, folder, ZH_PREFIX, capsys) as nb:
        page = nb.page
        nb.open(lab)
        nb.hide_left_sidebar()
        menus = [text.strip() for text in page.locator(".lm-MenuBar-itemLabel").all_inner_texts()]
        assert "文件" in menus, f"JupyterLab's menus are not in Chinese: {menus}"
        nb.run_all_cells(menu="运行")
        nb.wait_all_cells_ran(code_cells, RUN_ALL_TIMEOUT)
        panel = page.locator(".jp-OutputArea-output").filter(has=page.locator(".dtfkit-lab-run")).first
        panel.wait_for(timeout=PANEL_TIMEOUT * 1000)
        words = {
            "run": panel.locator(".dtfkit-lab-run").inner_text().strip(),
            "stop": panel.locator(".dtfkit-lab-stop").inner_text().strip(),
        }
        assert words == {"run": "运行", "stop": "停止"}, words
        text = panel.inner_text()
        assert "dtfkit 同步/异步实验" in text and "学习率" in text and "任务输出" in text, text
        assert "学习目标" in page.locator(".jp-Notebook").inner_text()
        panel.scroll_into_view_if_needed()
        shots = [nb.save_screenshot(folder / f"{ZH_PREFIX}-page.png")]
        panel.screenshot(path=str(folder / f"{ZH_PREFIX}-panel.png"))
        shots.append(folder / f"{ZH_PREFIX}-panel.png")
        feedback = page.locator(".jp-OutputArea-output").filter(has_text="练习 8.1").last
        feedback.wait_for(timeout=PANEL_TIMEOUT * 1000)
        said = feedback.inner_text()
        assert "✘ 练习 8.1" in said and "未通过" in said and "replicas_to_aggregate" in said, said
        assert "exercise" not in said and "failed" not in said, said
        feedback.scroll_into_view_if_needed()  # the page around it: the wrong answer's cell and its feedback
        shots.append(nb.save_screenshot(folder / f"{ZH_PREFIX}-feedback.png"))
    if update_screenshots():  # the Chinese chapter shows the Chinese panel (translate's localized images)
        shutil.copyfile(shots[1], ZH_COMMITTED_SCREENSHOT)
        shots.append(ZH_COMMITTED_SCREENSHOT)
    with capsys.disabled():
        print("\nChinese browser test screenshots:", *shots, sep="\n  ")
    for shot in shots[1:]:
        assert screenshot_problem(shot) is None, (shot, screenshot_problem(shot))
    assert screenshot_problem(ZH_COMMITTED_SCREENSHOT) is None, screenshot_problem(ZH_COMMITTED_SCREENSHOT)
