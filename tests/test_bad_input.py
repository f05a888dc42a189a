"""Bad input to the public APIs: each is refused with a clear error naming the argument (and how
to write it), before anything starts, fast and in bounded memory (issue 29, item 6).

Fuzz-style: many wrong values per argument, each checked for the error's type and for the name
of the argument in its message; ``no_spawn`` fails a test that starts any process, so the
refusals come before TensorFlow or a task could start. No time limit is asserted (a busy
machine may be slow); a refusal that hung or built something huge would show as a hang or a
memory error here, not pass.
"""

from __future__ import annotations

import pytest

import dtfkit
from dtfkit.engine.local import LocalLauncher, check_plan_tasks, plan_delays, plan_links
from dtfkit.errors import DtfkitError

HUGE = "9" * 10_000_000  # 10 MB: a message quoting it must stay short


def _cluster(**options):
    options = {"ps": 1, "workers": 2, "progress": False, "pool": False, "name": None, **options}
    return dtfkit.LocalCluster(**options)


# ------------------------------------------------------------ link= and delay= maps
@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("worker:7", "its tasks are ps:0, worker:0, worker:1"),
        ("worker:2", "its tasks are ps:0, worker:0, worker:1"),
        ("ps:1", "its tasks are ps:0, worker:0, worker:1"),
        ("evaluator", "one of its jobs ('ps', 'worker')"),
        ("chief", "one of its jobs ('ps', 'worker')"),
        ("chief:0", "its tasks are"),
        ("worker:01", "write 'worker:1'"),
        ("worker: 1", "write 'worker:1'"),
        ("worker:²", "a task ('worker:1')"),
        ("worker:-1", "a task ('worker:1')"),
        ("worker:" + "1" * 5000, "a task ('worker:1')"),
        ("Worker", "a task ('worker:1')"),
        ("", "a task ('worker:1')"),
        (None, "a task ('worker:1')"),
        (1, "a task ('worker:1')"),
        (("worker", 0), "a task ('worker:1')"),
    ],
)
@pytest.mark.parametrize("option", ["link", "delay"])
def test_a_link_or_delay_key_naming_no_task_of_the_cluster_is_refused(option, key, hint, no_spawn):
    value = "10mbit" if option == "link" else "5ms"
    with pytest.raises(DtfkitError) as info:
        _cluster(**{option: {"worker": value, key: value}})
    text = str(info.value)
    assert f"{option} key " in text and "names no task" in text, text
    assert hint in text, text
    assert len(text) < 600, text
    assert no_spawn == []


@pytest.mark.parametrize(
    "bad",
    [
        "-5ms",
        "-0.1s",
        "20 ms",
        "20",
        "20msec",
        "1e3ms",
        "11s",
        "inf s",
        "nan",
        "",
        HUGE + "ms",
        20,
        0.02,
        -1,
        True,
        b"20ms",
        ["20ms"],
        {"worker": 5},
        {"worker": None},
        {},
    ],
)
def test_a_bad_delay_value_is_refused_naming_it(bad, no_spawn):
    with pytest.raises(DtfkitError) as info:
        _cluster(delay=bad)
    text = str(info.value)
    assert text.startswith("delay"), text
    assert "us, ms or s" in text or "0ms to 10s" in text or "delay must be" in text, text
    assert len(text) < 600, text
    assert no_spawn == []


@pytest.mark.parametrize(
    "bad",
    [
        "100",
        "-1mbit",
        "0kbit",
        "1kbit",
        "11gbit",
        "100 mbps",
        "fast",
        HUGE + "mbit",
        "9" * 400 + "mbit",
        100,
        1e8,
        True,
        b"100mbit",
        ["100mbit"],
        {"ps": 50},
        {"ps": ""},
        {},
    ],
)
def test_a_bad_link_rate_is_refused_naming_it(bad, no_spawn):
    with pytest.raises(DtfkitError) as info:
        _cluster(link=bad)
    text = str(info.value)
    assert text.startswith("link"), text
    assert "kbit, mbit or gbit" in text or "link must be" in text, text
    assert len(text) < 600, text
    assert no_spawn == []


def test_keys_of_a_launcher_of_yours_are_checked_against_the_cluster_too(monkeypatch):
    from dtfkit.engine import netns

    monkeypatch.setattr(netns, "isolation_available", lambda: (True, ""))
    launcher = LocalLauncher(delay={"worker:5": "5ms"})  # it cannot know the cluster's tasks
    with pytest.raises(DtfkitError, match="delay key 'worker:5' names no task of this cluster"):
        _cluster(launcher=launcher, pool=None)
    assert launcher.describe().network == "pending"  # refused before it started anything


def test_keys_naming_the_clusters_tasks_and_jobs_are_accepted():
    plan = plan_links({"default": "1gbit", "ps": "50mbit", "worker:1": "10mbit", "client": "1gbit"})
    check_plan_tasks("link", plan, ["ps:0", "worker:0", "worker:1"])  # no error
    check_plan_tasks("delay", plan_delays("20ms"), ["worker:0"])
    with pytest.raises(DtfkitError, match="key 'worker:1' names no task of this cluster"):
        check_plan_tasks("link", plan, ["ps:0", "worker:0"])
