"""What dtfkit shows a learner, in the learner's language (``dtfkit.i18n``; fast tier).

English unless ``dtfkit.set_language`` or ``DTFKIT_LANG`` say otherwise; the words come from the
library's gettext catalog (``dtfkit/locale/zh_CN/LC_MESSAGES/dtfkit.po``), which
``tests/test_translations.py`` keeps complete: the exercises' feedback and hints, ``diagnose``'s findings
and fixes, the sync/async lab's panel. What the code decides on (a result's status, a finding's code) stays
English.
"""

from __future__ import annotations

import polib
import pytest

import dtfkit
from dtfkit import i18n
from dtfkit.errors import DtfkitError
from edition import translate


@pytest.fixture(autouse=True)
def english_after(monkeypatch):
    monkeypatch.delenv(i18n.LANGUAGE_ENV, raising=False)
    yield
    dtfkit.set_language(None)


def test_english_unless_asked_otherwise(monkeypatch):
    assert i18n.language() == "en" and i18n._("Run") == "Run"
    monkeypatch.setenv(i18n.LANGUAGE_ENV, "zh_CN")
    assert i18n.language() == "zh_CN" and i18n._("Run") == "运行"
    dtfkit.set_language("en")  # the call wins over the environment
    assert i18n._("Run") == "Run"
    dtfkit.set_language(None)
    assert i18n._("Run") == "运行"
    assert i18n._("words nobody marked") == "words nobody marked"


def test_an_unknown_language_is_a_clear_error():
    with pytest.raises(DtfkitError, match="dtfkit speaks en and zh_CN, not 'fr'"):
        dtfkit.set_language("fr")


def test_the_lab_panel_speaks_chinese():
    from dtfkit.lab import Lab

    dtfkit.set_language("zh_CN")
    with Lab() as lab:
        panel = lab.panel()
        words = [panel.run_button.description, panel.stop_button.description, panel.status.value]
        assert words == ["运行", "停止", "空闲"]
        assert panel.learning_rate.description == "学习率"
    dtfkit.set_language("en")
    with Lab() as lab:
        assert lab.panel().run_button.description == "Run"


def test_every_marked_string_is_in_the_catalog():
    marked = {entry.msgid for entry in translate.library_template()}
    assert {"Run", "Stop", "idle", "learning rate"} <= marked
    catalog = polib.pofile(str(i18n.catalog_path("zh_CN")))
    assert marked <= {entry.msgid for entry in catalog if not entry.obsolete}


def test_a_fuzzy_translation_is_not_shown(tmp_path, monkeypatch):
    catalog = polib.POFile()
    catalog.metadata = {"Content-Type": "text/plain; charset=utf-8"}
    catalog.append(polib.POEntry(msgid="Run", msgstr="运行"))
    catalog.append(polib.POEntry(msgid="Stop", msgstr="旧的译文", flags=["fuzzy"]))
    (tmp_path / "zh_CN" / "LC_MESSAGES").mkdir(parents=True)
    catalog.save(str(tmp_path / "zh_CN" / "LC_MESSAGES" / "dtfkit.po"))
    monkeypatch.setattr(i18n, "LOCALE", tmp_path)
    i18n._translations.cache_clear()
    try:
        dtfkit.set_language("zh_CN")
        assert (i18n._("Run"), i18n._("Stop")) == ("运行", "Stop")
    finally:
        i18n._translations.cache_clear()


def test_an_exercises_feedback_and_hint_in_chinese_and_unchanged_in_english():
    from dtfkit.course import check

    def tokens_handed_out(replicas_to_aggregate, total_num_replicas, updates):
        return replicas_to_aggregate * updates  # forgets the tokens put in at the start

    english = check.ch03.token_count(tokens_handed_out)
    assert str(english).startswith("✘ exercise 3.2 (Predict the tokens) failed: for replicas_to_aggregate=")
    dtfkit.set_language("zh_CN")
    chinese = check.ch03.token_count(tokens_handed_out)
    assert not chinese.passed and chinese.status == "failed"  # the status stays English for nbgrader
    headline, hint = str(chinese).splitlines()[:2]
    assert headline.startswith("✘ 练习 3.2") and translate._CJK.search(chinese.message)
    assert translate._CJK.search(hint) and "replicas_to_aggregate=2" in chinese.message
    assert "练习 3.2" in chinese._repr_html_()


def test_an_answer_that_calls_dtfkit_is_refused_in_chinese():
    from dtfkit.course import check
    from dtfkit.recipes import allreduce

    def ps_bytes_received(n, floats):
        return allreduce.expected_bytes("ps", n, floats)["ps:0"]["received"]

    dtfkit.set_language("zh_CN")
    result = check.ch09.ps_bytes(ps_bytes_received)
    assert not result.passed and "dtfkit" in result.message
    assert translate._CJK.search(result.message) and translate._CJK.search(result.hint)


def test_diagnose_names_the_mistake_and_its_fix_in_chinese():
    configs = [
        {"cluster": {"worker": ["localhost:2222", "localhost:2223"]}, "task": {"type": "worker", "index": i}}
        for i in (0, 0)
    ]
    english = str(dtfkit.diagnose(configs))
    dtfkit.set_language("zh_CN")
    diagnosis = dtfkit.diagnose(configs)
    assert "duplicate-task" in diagnosis.codes  # the codes are the same in every language
    finding = diagnosis.findings[0]
    assert translate._CJK.search(finding.message) and translate._CJK.search(finding.fix)
    assert str(diagnosis) != english and "修复" in str(diagnosis) and "任务" in diagnosis._repr_html_()
    assert translate._CJK.search(str(dtfkit.diagnose([configs[0]])))  # nothing found, said in Chinese


def test_the_language_reaches_the_processes_started_afterwards(monkeypatch):
    import os
    import subprocess
    import sys

    monkeypatch.setenv(i18n.LANGUAGE_ENV, "en")
    dtfkit.set_language("zh_CN")
    child = "from dtfkit.i18n import _; print(_('Run'))"
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "运行"
    dtfkit.set_language(None)  # back to what the environment said before
    assert os.environ[i18n.LANGUAGE_ENV] == "en"


def test_every_translation_keeps_the_englishs_fields():
    catalog = translate.read_catalog(i18n.catalog_path("zh_CN"))
    assert translate._placeholder_problems("dtfkit", catalog) == []
    broken = polib.POFile()
    broken.append(polib.POEntry(msgid="for {n} workers you said {got!r}", msgstr="{n} 个 worker：你说 {got}"))
    broken.append(polib.POEntry(msgid="ps:0 receives {want}", msgstr="ps:0 收到 {want"))
    problems = translate._placeholder_problems("dtfkit", broken)
    assert len(problems) == 2 and "['{got}', '{n}']" in problems[0] and "not a format template" in problems[1]


def test_the_cluster_tables_words_follow_the_language():
    """The cluster table's column titles and task states are shown in the reader's language; the data
    (``cluster.status()``) stays English, as tests and scripts read it."""
    from dtfkit.cluster_display import COLUMN_TITLES, shown_state
    from dtfkit.i18n import _, set_language

    try:
        set_language("zh_CN")
        assert [shown_state(s) for s in ("starting", "running", "busy", "killed", "exited (17)")] == [
            "启动中",
            "运行中",
            "忙碌",
            "已被杀掉",
            "已退出（退出码 17）",
        ]
        titles = [_(COLUMN_TITLES[c]) for c in ("task", "role", "address", "state")]
        assert titles == ["任务", "角色", "地址", "状态"]
    finally:
        set_language(None)
    assert shown_state("exited (17)") == "exited (17)" and _(COLUMN_TITLES["state"]) == "state"


def test_the_recipes_figures_are_drawn_in_the_readers_language():
    """A chapter's figures drawn by the kit (here chapter 11's α–β plot) carry Chinese titles, axes and legends
    in a Chinese chapter, with a font that has the glyphs after matplotlib's default when one is installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dtfkit.fonts import CHINESE_FONTS
    from dtfkit.i18n import set_language
    from dtfkit.recipes import alpha_beta

    try:
        set_language("zh_CN")
        ax = alpha_beta.plot_alpha_beta(3, 0.001, 8 / 100e6)
        assert ax.get_xlabel() == "梯度大小 S（字节）" and ax.get_ylabel() == "每次同步的时间（秒）"
        assert ax.get_title().startswith("α–β 模型，n = 3")
        assert "ps（模型）" in [t.get_text() for t in ax.get_legend().get_texts()]
        installed = {f.name for f in matplotlib.font_manager.fontManager.ttflist}
        if installed & set(CHINESE_FONTS):
            assert set(matplotlib.rcParams["font.family"]) & set(CHINESE_FONTS)
        plt.close(ax.figure)
    finally:
        set_language(None)
    ax = alpha_beta.plot_alpha_beta(3, 0.001, 8 / 100e6)
    assert ax.get_xlabel() == "gradient size S (bytes)"
    plt.close(ax.figure)


def test_the_start_line_the_fates_and_the_lab_history_follow_the_language():
    """What a Chinese chapter shows under a cell that starts tasks, in a sync run's table and legend, and in
    the lab's history: in Chinese; in English otherwise (the data stays English either way)."""
    from dtfkit.i18n import _, set_language
    from dtfkit.lab.runner import RunRecord, Settings
    from dtfkit.progress import Progress
    from dtfkit.recipes.sync.kernel_side import FATE_LABELS

    record = RunRecord(number=1, settings=Settings(mode="async"), state="finished")
    lab = type(
        "LabLike", (), {"history": [record], "table": lambda self: [{"run": 1, "state": "finished"}]}
    )()
    from dtfkit.lab.runner import Lab

    try:
        set_language("zh_CN")
        line = Progress(["ps:0", "worker:0"], "starting", enabled=False).done("started")
        assert line.startswith("已启动 2 个任务（ps:0, worker:0），用时 ")
        assert [_(FATE_LABELS[f]) for f in ("aggregated", "dropped", "pending")] == [
            "已聚合",
            "被丢弃",
            "待处理",
        ]
        html = Lab.history_html(lab)
        assert "已完成" in html and ">finished<" not in html
    finally:
        set_language(None)
    assert (
        Progress(["ps:0"], "starting", enabled=False)
        .done("restarted")
        .startswith("restarted 1 task (ps:0) in ")
    )
    assert ">finished<" in Lab.history_html(lab)


def test_a_listed_function_shows_its_comments_and_docstring_in_chinese_and_its_code_as_it_is(capsys):
    from dtfkit.course.listing import listing_units, show_source
    from dtfkit.recipes import allreduce

    show_source(allreduce.build_ring)
    english = capsys.readouterr().out
    dtfkit.set_language("zh_CN")
    show_source(allreduce.build_ring)
    chinese = capsys.readouterr().out
    assert "Ring all-reduce of" in english and "环形全归约" in chinese and "Ring all-reduce of" not in chinese
    assert "# what was sent, before any add" not in chinese
    # the same program: every token but the comments' and the docstring's words is the English one

    def blanked(source):
        for start, end, _text in sorted(listing_units(source, every=True), reverse=True):
            source = source[:start] + "…" + source[end:]
        return source

    assert blanked(english) == blanked(chinese)
    assert len(listing_units(english)) == len(listing_units(chinese, every=True)) == 3


def test_the_tutorial_scripts_listing_keeps_the_files_line_numbers_in_chinese(capsys):
    from dtfkit.recipes import tutorial_script as script

    script.show("main")
    english = capsys.readouterr().out.splitlines()
    dtfkit.set_language("zh_CN")
    script.show("main")
    chinese = capsys.readouterr().out.splitlines()
    assert len(english) == len(chinese)
    assert [line.split()[0] for line in english[1:]] == [line.split()[0] for line in chinese[1:]]
    assert "create a server for local task" in "\n".join(english)
    assert "为本地任务创建一个 server" in "\n".join(chinese)


def test_what_the_tutorial_script_prints_is_read_back_in_either_language():
    from dtfkit.recipes.tutorial_script import kernel_side

    english = "Train step 20, loss: 1.000000\nworker 1 done: local_steps=3 global_step=40\n"
    assert kernel_side.printed_line_pattern(kernel_side._TRAIN_STEP).findall(english) == [("20", "1.000000")]
    dtfkit.set_language("zh_CN")
    chinese = (
        i18n._("Train step {step:d}, loss: {loss:f}").format(step=20, loss=1.0)
        + "\n"
        + i18n._("worker {index} done: local_steps={local_steps:d} global_step={step:d}").format(
            index=1, local_steps=3, step=40
        )
    )
    assert "Train step" not in chinese
    assert kernel_side.printed_line_pattern(kernel_side._TRAIN_STEP).findall(chinese) == [("20", "1.000000")]
    assert kernel_side.printed_line_pattern(kernel_side._DONE).findall(chinese) == [("1", "3", "40")]


def test_a_launchs_summary_and_a_remote_failure_speak_chinese():
    from dtfkit.engine.owner.calls import Failure
    from dtfkit.launch_script import LaunchResult

    result = LaunchResult({"ps:0": None, "worker:0": 0}, [], False, 2.0, "/tmp/logs")
    assert result.summary().startswith("all workers finished in 2.0 s (ps:0: ended by the launcher")
    dtfkit.set_language("zh_CN")
    shown = result.summary()
    assert "finished" not in shown and "ended by the launcher" not in shown and "/tmp/logs" in shown
    assert Failure(dtfkit.engine.wire.layout.TaskId.parse("worker:1"), "ValueError").described() == (
        "worker:1 也抛出了 ValueError"
    )
