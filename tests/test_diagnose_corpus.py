"""``dtfkit.diagnose`` on a corpus of broken configs that chapter 12 never shows, each of which
must be named exactly (the finding's code and task, nothing more), on valid configs that must give
no finding, and on seeded random garbage: every input returns a ``Diagnosis`` or raises the
documented ``DiagnoseInputError`` naming the argument and the next step. Fast tier: no TensorFlow."""

from __future__ import annotations

import json
import math
import os
import random
import tracemalloc

import pytest
from test_diagnose import every_process, tf_config

import dtfkit
from dtfkit.diagnosis import DiagnoseInputError, Diagnosis


def named(d: Diagnosis) -> set[tuple[str, str]]:
    return {(f.code, f.task) for f in d.findings}


HOSTS3 = {"worker": ["node-a.lab:2222", "node-b.lab:2222", "node-c.lab:2222"]}
PSS = {
    "chief": ["c.lab:2222"],
    "ps": ["p0.lab:2222", "p1.lab:2222"],
    "worker": ["w0.lab:2222", "w1.lab:2222"],
}
W2 = {"worker": ["node-a:2222", "node-b:2222"]}


def with_task(task: dict, cluster: dict = W2) -> dict:
    return {"cluster": cluster, "task": task}


# (what is wrong, configs, options, expected {(code, task)})
BROKEN = [
    # --- wrong types in the task
    ("index is a list", tf_config(W2, "worker", [0]), {}, {("bad-task-index", "TF_CONFIG")}),
    ("index is a bool", tf_config(W2, "worker", True), {}, {("bad-task-index", "TF_CONFIG")}),
    ("index is negative", tf_config(W2, "worker", -2), {}, {("bad-task-index", "TF_CONFIG")}),
    ("index is a fraction", tf_config(W2, "worker", 1.5), {}, {("bad-task-index", "TF_CONFIG")}),
    ("index is text of a fraction", tf_config(W2, "worker", "1.5"), {}, {("bad-task-index", "TF_CONFIG")}),
    ("index is a superscript digit", tf_config(W2, "worker", "²"), {}, {("bad-task-index", "TF_CONFIG")}),
    (
        "index is JSON Infinity",
        '{"cluster": {"worker": ["node-a:2222"]}, "task": {"type": "worker", "index": Infinity}}',
        {},
        {("bad-task-index", "TF_CONFIG")},
    ),
    ("index past int32", tf_config(W2, "worker", 2**40), {}, {("bad-task-index", "TF_CONFIG")}),
    ("type is a number", tf_config(W2, 7, 0), {}, {("bad-task-type", "TF_CONFIG")}),
    ("type is empty", tf_config(W2, "", 0), {}, {("bad-task-type", "TF_CONFIG")}),
    ("type is a megabyte long", tf_config(W2, "w" * 1_000_000, 0), {}, {("bad-task-type", "TF_CONFIG")}),
    # --- wrong shapes of the cluster
    ("cluster is a list", tf_config(["node-a:2222"], "worker", 0), {}, {("bad-cluster", "worker:0")}),
    (
        "job is one comma string",
        tf_config({"worker": "a:1,b:1"}, "worker", 0),
        {},
        {("bad-cluster", "worker:0")},
    ),
    ("cluster is empty", tf_config({}, "worker", 0), {}, {("bad-cluster", "worker:0")}),
    ("job name is empty", tf_config({"": ["a:1"]}, "worker", 0), {}, {("bad-cluster", "worker:0")}),
    (
        "job name is a megabyte long",
        tf_config({"w" * 1_000_000: ["a:1"]}, "worker", 0),
        {},
        {("bad-cluster", "worker:0")},
    ),
    (
        "sparse key is not a number",
        tf_config({"worker": {"w0": "a:1"}}, "worker", 0),
        {},
        {("bad-cluster", "worker:0")},
    ),
    (
        "sparse key is a superscript",
        tf_config({"worker": {"²": "a:1"}}, "worker", 0),
        {},
        {("bad-cluster", "worker:0")},
    ),
    # --- the strategy's own rules: missing ps, missing worker, a ps under MWMS
    (
        "PSS without ps",
        every_process({"chief": ["c:1"], "worker": ["w:1"]}),
        {"strategy": "ps"},
        {("pss-needs-ps", "ps")},
    ),
    (
        "PSS without worker",
        every_process({"chief": ["c:1"], "ps": ["p:1"]}),
        {"strategy": "ParameterServerStrategy"},
        {("pss-needs-worker", "worker")},
    ),
    (
        "MWMS with a ps",
        every_process(PSS),
        {"strategy": "MultiWorkerMirroredStrategy"},
        {("mwms-with-ps", "ps")},
    ),
    # --- indices out of range
    ("worker counted from 1", tf_config(HOSTS3, "worker", 3), {}, {("task-index-out-of-range", "worker:3")}),
    ("a second chief", tf_config(PSS, "chief", 1), {}, {("task-index-out-of-range", "chief:1")}),
    ("ps index past the list", tf_config(PSS, "ps", 2), {}, {("task-index-out-of-range", "ps:2")}),
    (
        "sparse job, index at the gap's end",
        tf_config({"worker": {"0": "a:1", "5": "b:1"}}, "worker", 5),
        {},
        {("task-index-out-of-range", "worker:5")},
    ),
    (
        "sparse job of one task at index 10**9",
        tf_config({"worker": {"1000000000": "a:1"}}, "worker", 0),
        {},
        {("task-index-out-of-range", "worker:0")},
    ),
    # --- duplicate addresses
    (
        "chief and worker on one host:port",
        every_process({"chief": ["node-a:2222"], "worker": ["node-a:2222", "node-b:2222"]}),
        {},
        {("duplicate-address", "worker:0")},
    ),
    (
        "[::1] and localhost on one port",
        every_process({"worker": ["[::1]:2222", "localhost:2222"]}),
        {},
        {("duplicate-address", "worker:1")},
    ),
    (
        "two ps on one port, hostnames in capitals",
        every_process({"ps": ["Node-A:2222", "node-a:2222"], "worker": ["node-b:2222"]}),
        {},
        {("duplicate-address", "ps:1")},
    ),
    # --- this machine's addresses across machines
    (
        "localhost with hostnames given",
        every_process({"worker": ["localhost:2222", "localhost:2223"]}),
        {"machines": ["node-a", "node-b"]},
        {("localhost-multi-machine", "worker:0"), ("localhost-multi-machine", "worker:1")},
    ),
    (
        "Debian's 127.0.1.1 beside another host",
        every_process({"worker": ["127.0.1.1:2222", "node-b:2222"]}),
        {},
        {("localhost-multi-machine", "worker:0")},
    ),
    (
        "a server's 0.0.0.0 in the cluster",
        every_process({"chief": ["0.0.0.0:2222"], "worker": ["node-b:2222"]}),
        {},
        {("localhost-multi-machine", "chief:0")},
    ),
    # --- addresses gRPC cannot dial as written
    (
        "IPv6 without brackets",
        every_process({"worker": ["fe80::1:2222", "[fe80::2]:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "IPv4 in brackets",
        every_process({"worker": ["[10.0.0.1]:2222", "10.0.0.2:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "a space before the host",
        every_process({"worker": [" node-a:2222", "node-b:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "a newline after the port",
        every_process({"worker": ["node-a:2222\n", "node-b:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "a non-ASCII hostname",
        every_process({"worker": ["nöde-a:2222", "node-b:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "a path in the host",
        every_process({"worker": ["node-a/ps:2222", "node-b:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "null address",
        every_process({"worker": ["node-a:2222", None]}),
        {},
        {("address-not-dialable", "worker:1")},
    ),
    (
        "a bare port number",
        every_process({"worker": ["node-a:2222", 2223]}),
        {},
        {("address-not-dialable", "worker:1")},
    ),
    (
        "a host of 10 MB",
        every_process({"worker": ["a" * 10_000_000 + ":2222", "node-b:2222"]}),
        {},
        {("address-not-dialable", "worker:0")},
    ),
    (
        "a port of 10 MB",
        every_process({"worker": ["node-a:" + "2" * 10_000_000, "node-b:2222"]}),
        {},
        {("address-bad-port", "worker:0")},
    ),
    (
        "a slash after the port",
        every_process({"worker": ["node-a:2222/", "node-b:2222"]}),
        {},
        {("address-bad-port", "worker:0")},
    ),
    (
        "an http URL",
        every_process({"worker": ["http://node-a:2222", "node-b:2222"]}),
        {},
        {("address-scheme", "worker:0")},
    ),
    # --- misspelt keys
    ("task 'tpye'", with_task({"tpye": "worker", "index": 0}), {}, {("misspelt-key", "TF_CONFIG")}),
    ("task 'idx'", with_task({"type": "worker", "idx": 0}), {}, {("misspelt-key", "TF_CONFIG")}),
    (
        "task 'task_index'",
        with_task({"type": "worker", "task_index": 1}),
        {},
        {("misspelt-key", "TF_CONFIG")},
    ),
    (
        "task 'job_name' (TF1's flag)",
        with_task({"job_name": "worker", "index": 1}),
        {},
        {("misspelt-key", "TF_CONFIG")},
    ),
    (
        "task 'Type' capitalised",
        with_task({"Type": "worker", "index": 1}),
        {},
        {("misspelt-key", "TF_CONFIG")},
    ),
    (
        "top-level 'clsuter'",
        {"clsuter": W2, "task": {"type": "worker", "index": 0}},
        {},
        {("misspelt-key", "worker:0")},
    ),
    (
        "top-level 'tasks'",
        {"cluster": W2, "tasks": {"type": "worker", "index": 0}},
        {},
        {("misspelt-key", "TF_CONFIG")},
    ),
    # --- job names TF refuses, evaluators
    ("job 'workers'", every_process({"workers": ["a:1"]}), {}, {("unknown-job", "workers")}),
    ("job 'Chief'", every_process({"Chief": ["a:1"], "worker": ["b:1"]}), {}, {("unknown-job", "Chief")}),
    (
        "job 'evaluators'",
        every_process({"worker": ["a:1"], "evaluators": ["b:1"]}),
        {},
        {("unknown-job", "evaluators")},
    ),
    (
        "two evaluators in the cluster",
        every_process({"worker": ["a:1"], "evaluator": ["b:1", "c:1"]}),
        {},
        {("several-evaluators", "evaluator")},
    ),
    (
        "an evaluator index past the only one",
        tf_config({"worker": ["a:1"], "evaluator": ["b:1"]}, "evaluator", 1),
        {},
        {("task-index-out-of-range", "evaluator:1")},
    ),
    # --- processes that do not add up
    (
        "two processes claim the chief",
        [tf_config(PSS, "chief", 0)] + every_process(PSS),
        {},
        {("duplicate-task", "chief:0")},
    ),
    ("a ps nobody starts", every_process(PSS, skip=("ps:1",)), {}, {("never-launched", "ps:1")}),
    (
        "one process on yesterday's port",
        [tf_config(W2, "worker", 0), tf_config({"worker": ["node-a:2222", "node-b:2223"]}, "worker", 1)],
        {},
        {("clusters-disagree", "worker:1")},
    ),
    (
        "a ClusterSpec with a job TF cannot read, where a TF_CONFIG goes",
        {"master": "a:1", "worker": ["b:1"]},
        {},
        {("missing-task", "TF_CONFIG"), ("missing-cluster", "TF_CONFIG")},
    ),
    ("no cluster at all", {"task": {"type": "worker", "index": 0}}, {}, {("missing-cluster", "worker:0")}),
    # --- texts TensorFlow cannot read
    (
        "a trailing comma",
        '{"cluster": {"worker": ["a:1"],}, "task": {"type": "worker", "index": 0}}',
        {},
        {("tf-config-not-json", "TF_CONFIG")},
    ),
    (
        "Latin-1 bytes",
        '{"cluster": {"worker": ["nöde:1"]}}'.encode("latin-1"),
        {},
        {("tf-config-not-json", "TF_CONFIG")},
    ),
    ("100,000 nested arrays", "[" * 100_000 + "]" * 100_000, {}, {("tf-config-not-json", "TF_CONFIG")}),
    ("a JSON array", '["node-a:2222", "node-b:2222"]', {}, {("tf-config-not-dict", "TF_CONFIG")}),
    ("JSON null", "null", {}, {("tf-config-not-dict", "TF_CONFIG")}),
]

VALID = [
    ("PSS on six machines", every_process(PSS), {"strategy": "ps", "machines": 5}),
    ("MWMS with a chief", every_process({"chief": ["c.lab:2222"], **HOSTS3}), {"strategy": "mwms"}),
    ("bracketed IPv6", every_process({"worker": ["[fe80::1]:2222", "[fe80::2]:2222"]}), {"machines": 2}),
    ("IPv6 with a zone", every_process({"worker": ["[fe80::1%eth0]:2222", "[fe80::2%eth0]:2222"]}), {}),
    ("one local worker", every_process({"worker": ["localhost:2222"]}), {}),
    ("index as text, as TF's int() reads it", tf_config(W2, "worker", "1"), {}),
    ("index as a whole float", tf_config(W2, "worker", 1.0), {}),
    ("a dense sparse job", every_process({"worker": {"0": "a:1", "1": "b:1"}}), {}),
    ("UTF-8 bytes, one per process", [json.dumps(c).encode() for c in every_process(HOSTS3)], {}),
    (
        "rpc_layer and environment keys",
        {**tf_config(W2, "worker", 0), "rpc_layer": "grpc", "environment": "cloud"},
        {},
    ),
    ("an evaluator outside the cluster", tf_config(HOSTS3, "evaluator", 0), {"machines": 4}),
    ("underscores and a trailing dot", every_process({"worker": ["node_a:2222", "node-b.lab.:2222"]}), {}),
    (
        "one machine, many ports",
        every_process({"chief": ["127.0.0.1:2220"], "worker": ["localhost:2221", "localhost:2222"]}),
        {"machines": 1},
    ),
    ("a tf.train.ClusterSpec-like object", type("Spec", (), {"as_dict": lambda self: PSS})(), {}),
]


def test_the_corpus_is_as_large_as_promised():
    assert len(BROKEN) >= 40 and len(VALID) >= 10
    assert len({name for name, *_ in BROKEN}) == len(BROKEN)
    assert len({code for *_, expected in BROKEN for code, _ in expected}) >= 20  # many kinds, not one


@pytest.mark.parametrize("configs, options, expected", [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_each_broken_config_is_named(configs, options, expected):
    d = dtfkit.diagnose(configs, **options)
    assert named(d) == expected, str(d)
    for finding in d.findings:
        assert finding.message.endswith(".") and finding.fix.endswith("."), finding


@pytest.mark.parametrize("configs, options", [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_configs_give_no_finding(configs, options):
    d = dtfkit.diagnose(configs, **options)
    assert d.findings == (), str(d)


# ------------------------------------------------------------------ arguments diagnose cannot read
@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"strategy": 42}, "strategy=42"),
        ({"strategy": "horovod"}, "strategy='horovod'"),
        ({"machines": 2.0}, "machines=2.0"),
        ({"machines": "node-a"}, "machines='node-a'"),
        ({"machines": 0}, "machines=0"),
        ({"machines": True}, "machines=True"),
        ({"machines": []}, "machines is empty"),
        ({"machines": [1, 2]}, "machines holds 1"),
        ({"machines": {"a": 1}}, "machines={'a': 1}"),
        ({"cluster": "x"}, "cluster='x'"),
        ({"cluster": {"worker": ["a:1"]}}, "cluster={'worker'"),
        ({"logs": 42}, "logs=42"),
        ({"logs": {"worker:0": ["line"]}}, "logs['worker:0']"),
        ({"logs": {0: "text"}}, "logs has the key 0"),
    ],
)
def test_a_wrong_argument_is_named_with_the_next_step(kwargs, argument):
    with pytest.raises(DiagnoseInputError) as error:
        dtfkit.diagnose(W2, **kwargs)
    assert argument in str(error.value) and "Next:" in str(error.value)
    assert isinstance(error.value, ValueError) and isinstance(error.value, TypeError)


def test_nothing_to_diagnose_is_said_plainly(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for nothing in (None, os.environ.get("TF_CONFIG"), [], ()):
        with pytest.raises(DiagnoseInputError, match="nothing to diagnose") as error:
            dtfkit.diagnose(nothing)
        assert "no known mistake" not in str(error.value) and "Next:" in str(error.value)
    with pytest.raises(DiagnoseInputError, match="TF_CONFIG is not set"):
        dtfkit.diagnose()


def test_sizes_no_cluster_has_are_refused_before_they_are_checked():
    huge = json.dumps({"cluster": {"worker": [f"h{i}:2222" for i in range(700_000)]}})
    assert len(huge) > 10_000_000
    with pytest.raises(DiagnoseInputError, match="700,000 tasks"):
        dtfkit.diagnose(huge)
    with pytest.raises(DiagnoseInputError, match="characters long"):
        dtfkit.diagnose(" " * (17 * 1024 * 1024))
    with pytest.raises(DiagnoseInputError, match="10,001 TF_CONFIGs"):
        dtfkit.diagnose([{}] * 10_001)


def test_a_sparse_job_of_index_10_to_the_9_stays_one_entry():
    tracemalloc.start()
    try:
        d = dtfkit.diagnose([tf_config({"worker": {"1000000000": "a:1"}}, "worker", 1_000_000_000)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert named(d) == {("task-index-out-of-range", "worker:1000000000")}, str(d)
    assert "TensorFlow refuses task index 1000000000" in d.findings[0].message
    assert peak < 10 * 1024 * 1024  # a list of 10**9 entries would need 8 GB


def test_ten_megabytes_of_json_is_read():
    # the largest cluster diagnose checks (20,000 tasks, 200-character hostnames), and an 'environment'
    # (a key TensorFlow reads as text) long enough to make the TF_CONFIG 10 MB
    label = "x" * 60
    cluster = {"worker": [f"w{i}.{label}.{label}.{label}.lab:2222" for i in range(20_000)]}
    text = json.dumps({**tf_config(cluster, "worker", 0), "environment": "e" * 6_000_000})
    assert len(text) > 10_000_000
    assert dtfkit.diagnose(text).findings == ()


# ------------------------------------------------------------------ seeded garbage
ARGUMENTS = ("tf_config", "machines", "strategy", "cluster", "logs")


def _deep(depth: int, kind: str) -> object:
    value: object = "a:1"
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def _cycle() -> list:
    loop: list = []
    loop.append(loop)
    return loop


# Built once: making 100,000 levels for every case would cost the test more than diagnosing them.
DEEP = {(depth, kind): _deep(depth, kind) for depth in (50, 5_000, 100_000) for kind in ("list", "dict")}
CYCLE = _cycle()
LONG = "w" * 100_000 + ":2222"  # past every name and host limit


class _Garbage:
    """Random values of every JSON type (and some that JSON has not), and mutations of a valid
    TF_CONFIG, from one seed: the same inputs on every run."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def scalar(self) -> object:
        r = self.rng
        return r.choice(
            [
                None,
                True,
                False,
                r.randint(-(2**70), 2**70),
                r.choice([math.inf, -math.inf, math.nan, 1e308, -0.0, 2.5]),
                r.choice(
                    ["", "²", "٣", "Infinity", "NaN", "-1", "1e3", " 1", "worker", "a:1", "\x00", "ï»¿{"]
                ),
                "".join(chr(r.randint(0, 0x2FFF)) for _ in range(r.randint(0, 12))),
                bytes(r.randint(0, 255) for _ in range(r.randint(0, 12))),
                LONG,
            ]
        )

    def value(self, depth: int = 0) -> object:
        r = self.rng
        if depth > 4 or r.random() < 0.4:
            return self.scalar()
        if r.random() < 0.5:
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        keys = ["cluster", "task", "type", "index", "worker", "ps", "chief", "0", "1000000000", "²", "tpye"]
        return {
            r.choice(keys + [self.scalar()]) if r.random() < 0.2 else r.choice(keys): self.value(depth + 1)
            for _ in range(r.randint(0, 4))
        }

    def mutated(self) -> object:
        r = self.rng
        config = json.loads(json.dumps(tf_config(PSS, r.choice(["chief", "ps", "worker"]), r.randint(0, 2))))
        for _ in range(r.randint(1, 3)):
            cluster = config.get("cluster")
            workers = cluster.get("worker") if isinstance(cluster, dict) else None
            target = r.choice([config, config.get("task"), cluster, workers])
            if isinstance(target, dict) and target:
                key = r.choice(list(target))
                if r.random() < 0.3:
                    target.pop(key)
                else:
                    target[
                        key if r.random() < 0.7 else self.scalar() if r.random() < 0.5 else str(key)[::-1]
                    ] = self.value()
            elif isinstance(target, list) and target:
                target[r.randrange(len(target))] = self.value()
        if r.random() < 0.3:
            text = json.dumps(config, default=repr, skipkeys=True)
            cut = r.randrange(len(text) + 1)
            return (
                text[:cut] + r.choice(["", "}", ",", "]", "\\", '"']) + text[cut:]
                if r.random() < 0.5
                else text
            )
        return config

    def tf_config(self) -> object:
        r = self.rng
        kind = r.random()
        if kind < 0.45:
            return self.mutated()
        if kind < 0.6:
            return [self.mutated() for _ in range(r.randint(1, 4))]
        if kind < 0.75:
            return self.value()
        if kind < 0.85:
            return bytes(r.randint(0, 255) for _ in range(r.randint(0, 64)))
        if kind < 0.9:
            return DEEP[r.choice([50, 5_000, 100_000]), r.choice(["list", "dict"])]
        if kind < 0.95:
            return tf_config({"worker": [DEEP[100_000, "list"], CYCLE]}, DEEP[100_000, "dict"], CYCLE)
        depth = r.choice([500, 5_000, 100_000])
        return "[" * depth + '"a:1"' + "]" * depth

    def options(self) -> dict:
        r = self.rng
        options: dict = {}
        if r.random() < 0.3:
            options["machines"] = r.choice(
                [None, 2, 0, -1, 2.0, "node-a", ["a", "b"], [], [None], {"a": 1}, 10**9, True]
            )
        if r.random() < 0.2:
            options["strategy"] = r.choice([None, "mwms", "ps", 42, "", "Horovod", b"mwms"])
        if r.random() < 0.2:
            options["logs"] = r.choice(
                [
                    {"worker:0": self.scalar()},
                    {"worker:0": "Socket closed"},
                    self.value(),
                    "Collective ops is aborted by: x",
                    b"\xff\xfe",
                    ValueError("x"),
                ]
            )
        if r.random() < 0.05:
            options["cluster"] = self.value()
        return options


def test_garbage_gets_a_diagnosis_or_a_clear_error():
    garbage = _Garbage(seed=29)
    outcomes = {"diagnosis": 0, "error": 0}
    for case in range(4000):
        tf_config_value, options = garbage.tf_config(), garbage.options()
        try:
            d = dtfkit.diagnose(tf_config_value, **options)
        except DiagnoseInputError as error:
            text = str(error)
            assert any(a in text for a in ARGUMENTS) and "Next:" in text, (case, text)
            outcomes["error"] += 1
            continue
        assert isinstance(d, Diagnosis), case
        for f in d.findings:
            assert all(isinstance(x, str) and x for x in (f.code, f.message, f.fix)), (case, f)
            assert len(f.message) < 2_000 and len(f.task) < 300, (case, f.message[:300], f.task[:300])
        str(d), d._repr_html_()
        outcomes["diagnosis"] += 1
    # both paths were taken many times: the generator reaches the rules and the argument checks
    assert outcomes["diagnosis"] > 500 and outcomes["error"] > 100, outcomes
