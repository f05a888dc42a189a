"""Exercise 12.1 (find the broken TF_CONFIG): a reference answer written without ``dtfkit.diagnose``
passes, also with the hidden kinds; wrong answers fail with a hint that does not name the mistake.
The check runs in plain Python: no process starts (``no_spawn``)."""

from __future__ import annotations

import json
import random

import pytest

from dtfkit.course import check
from dtfkit.course.check import ch12
from dtfkit.diagnosis import diagnose

KNOWN = ("chief", "worker", "ps", "evaluator")


def _address_mistake(address: str) -> str | None:
    if "://" in address:
        return "address-scheme"
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return "address-no-port"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return "address-bad-port"
    return None


def find_mistake(tf_configs):
    """A learner's answer, as the chapter's text builds it up (every kind, hidden ones included)."""
    for config in tf_configs:
        if "task" not in config:
            return "missing-task"
        if "cluster" not in config:
            return "missing-cluster"
    clusters = [c["cluster"] for c in tf_configs]
    if any(c != clusters[0] for c in clusters):
        return "clusters-disagree"
    cluster = clusters[0]
    if any(job not in KNOWN for job in cluster):
        return "chief-and-master" if {"chief", "master"} <= set(cluster) else "unknown-job"
    if len(cluster.get("chief", [])) > 1:
        return "several-chiefs"
    places = []
    for address in [a for tasks in cluster.values() for a in tasks]:
        mistake = _address_mistake(address)
        if mistake:
            return mistake
        host, port = address.rsplit(":", 1)
        host = host.lower()
        places.append(("loopback" if host == "localhost" or host.startswith("127.") else host, int(port)))
    if len(set(places)) < len(places):
        return "duplicate-address"
    loopback = [host == "loopback" for host, _ in places]
    if any(loopback) and not all(loopback):
        return "localhost-multi-machine"
    claimed = [(c["task"]["type"], c["task"]["index"]) for c in tf_configs]
    for job, index in claimed:
        if job == "evaluator" and job not in cluster:
            continue  # TensorFlow accepts an evaluator outside the cluster
        if job not in cluster:
            return "task-type-not-in-cluster"
        if index >= len(cluster[job]):
            return "task-index-out-of-range"
    if len(set(claimed)) < len(claimed):
        return "duplicate-task"
    if any(
        (job, i) not in claimed
        for job, tasks in cluster.items()
        if job != "evaluator"  # nothing waits for the evaluator
        for i in range(len(tasks))
    ):
        return "never-launched"
    return "no mistake"


def broad_rules(tf_configs):
    """The chapter's former reference answer, word for word: address strings compared as written, every
    task of the cluster expected to run, every task type required in the cluster. It is wrong on an
    evaluator nobody launched, an evaluator outside the cluster, and localhost:P beside 127.0.0.1:P."""
    for config in tf_configs:
        if "task" not in config:
            return "missing-task"
        if "cluster" not in config:
            return "missing-cluster"
    clusters = [config["cluster"] for config in tf_configs]
    if any(c != clusters[0] for c in clusters):
        return "clusters-disagree"
    cluster = clusters[0]
    if any(job not in ("chief", "worker", "ps", "evaluator") for job in cluster):
        return "chief-and-master" if {"chief", "master"} <= set(cluster) else "unknown-job"
    if len(cluster.get("chief", [])) > 1:
        return "several-chiefs"
    addresses = [address for tasks in cluster.values() for address in tasks]
    for address in addresses:
        if "://" in address:
            return "address-scheme"
        host, colon, port = address.rpartition(":")
        if not colon or not host:
            return "address-no-port"
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            return "address-bad-port"
    if len(set(addresses)) < len(addresses):
        return "duplicate-address"
    local = [address.startswith(("localhost:", "127.")) for address in addresses]
    if any(local) and not all(local):
        return "localhost-multi-machine"
    claimed = [(config["task"]["type"], config["task"]["index"]) for config in tf_configs]
    for job, index in claimed:
        if job not in cluster:
            return "task-type-not-in-cluster"
        if index >= len(cluster[job]):
            return "task-index-out-of-range"
    if len(set(claimed)) < len(claimed):
        return "duplicate-task"
    for job, tasks in cluster.items():
        if any((job, index) not in claimed for index in range(len(tasks))):
            return "never-launched"
    return "no mistake"


def summary(result) -> dict:
    return {"status": result.status, "message": result.message, "hint": result.hint}


def assert_fails_without_naming_the_mistake(result, expected: str) -> None:
    assert result.status == "failed", result
    text = f"{result.message}\n{result.hint}"
    assert expected in text, (expected, summary(result))
    assert result.hint, summary(result)
    # The hint points where to look; it never names the mistake's code or this answer's lines.
    for code in ch12.SHOWN + ch12.HIDDEN:
        assert code not in result.hint, (code, summary(result))
    for giveaway in ("index >= len", "len(set(claimed))", "not in claimed"):
        assert giveaway not in text, (giveaway, summary(result))


def test_12_1_a_reference_answer_passes_with_the_hidden_kinds(no_spawn):
    assert check.ch12.broken_config(find_mistake).status == "passed"
    result = check.ch12.broken_config(find_mistake, hidden=True)
    assert result.status == "passed", summary(result)
    assert "kinds the text never shows" in result.message and "sound ones" in result.message
    assert no_spawn == []


def test_12_1_rules_applied_too_broadly_fail_only_the_hidden_tests(no_spawn):
    assert check.ch12.broken_config(broad_rules).status == "passed"
    result = check.ch12.broken_config(broad_rules, hidden=True)
    assert result.status == "failed", summary(result)
    assert_fails_without_naming_the_mistake(result, "you said")
    assert no_spawn == []


def test_12_1_the_hidden_traps_are_an_evaluator_and_localhost_beside_127_0_0_1():
    hidden = ch12.broken_clusters(hidden=True)
    sound = [configs for configs, code in hidden if code == ch12.NO_MISTAKE]
    assert sound and all(diagnose(configs).codes == set() for configs in sound)
    # an evaluator in the cluster that no process runs, and one that runs outside the cluster
    assert any("evaluator" in c[0]["cluster"] for c in sound)
    assert any(
        any(p["task"]["type"] == "evaluator" for p in c) for c in sound if "evaluator" not in c[0]["cluster"]
    )
    aliases = [
        configs
        for configs, code in hidden
        if code == "duplicate-address"
        and any(a.startswith("127.0.0.1:") for a in sum(configs[0]["cluster"].values(), []))
    ]
    assert aliases, "no case where localhost:P and 127.0.0.1:P name the same server"


def test_12_1_every_case_has_exactly_the_mistake_it_was_made_with():
    shown, hidden = ch12.broken_clusters(), ch12.broken_clusters(hidden=True)
    assert {kind for _, kind in shown} == set(ch12.SHOWN)
    assert {kind for _, kind in hidden} == {*ch12.SHOWN, *ch12.HIDDEN, ch12.NO_MISTAKE}
    for configs, kind in shown + hidden:
        assert diagnose(configs).codes == ({kind} if kind != ch12.NO_MISTAKE else set())
    # Drawn fresh every run (no seeds to enumerate), the same from the same generator.
    assert ch12.broken_clusters() != shown
    assert ch12.broken_clusters(rng=random.Random(7)) == ch12.broken_clusters(rng=random.Random(7))


SHOWN_KINDS = ch12.SHOWN  # copied out: an answer that reads the check module is refused


def _shown_only(tf_configs):
    mistake = find_mistake(tf_configs)
    return mistake if mistake in SHOWN_KINDS else "duplicate-task"


def _off_by_one(tf_configs):
    """Checks ``index > len(job)`` instead of ``>=``: an index one past the end slips through, and the
    rules after it call the cluster's missing task never launched."""
    mistake = find_mistake(tf_configs)
    return "never-launched" if mistake == "task-index-out-of-range" else mistake


def _always_the_same(tf_configs):
    return "never-launched" if tf_configs else "duplicate-task"


def _misspelled(tf_configs):
    mistake = find_mistake(tf_configs)
    return "index-out-of-range" if mistake == "task-index-out-of-range" else mistake


def _not_a_string(tf_configs):
    return {"code": find_mistake(tf_configs)}


@pytest.mark.parametrize(
    "wrong, hidden, expected",
    [
        (_shown_only, True, "that is not their mistake"),
        (_off_by_one, False, "task index with the number of addresses"),
        (_always_the_same, False, "that is not their mistake"),
        (_misspelled, False, "not one of the codes the chapter lists"),
        (_not_a_string, False, "return the mistake's code as a string"),
    ],
)
def test_12_1_wrong_answers_fail_with_a_hint(no_spawn, wrong, hidden, expected):
    result = check.ch12.broken_config(wrong, hidden=hidden)
    assert_fails_without_naming_the_mistake(result, expected)
    # The configs it failed on come with the feedback, as JSON the learner can paste.
    assert all(json.loads(line) for line in result.details)
    assert no_spawn == []


def test_12_1_an_answer_that_ignores_its_argument_fails():
    def constant(tf_configs):
        return "duplicate-task"

    result = check.ch12.broken_config(constant)
    assert_fails_without_naming_the_mistake(result, "never reads `tf_configs`")


def test_12_1_a_stub_is_not_attempted():
    def stub(tf_configs):
        raise NotImplementedError()

    assert check.ch12.broken_config(stub).status == "not attempted yet"


def test_12_1_the_answer_cannot_change_the_cases():
    def vandal(tf_configs):
        mistake = find_mistake(tf_configs)
        tf_configs.clear()
        return mistake

    assert check.ch12.broken_config(vandal).status == "passed"
