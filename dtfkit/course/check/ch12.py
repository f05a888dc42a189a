"""Checks for chapter 12 (when distributed TensorFlow goes wrong).

12.1 hands the learner's ``find_mistake(tf_configs)`` lists of TF_CONFIGs (one per process) with
one mistake each, drawn fresh every run by a generator (the hidden tests add sound jobs, answered
``"no mistake"``, and traps: an evaluator nobody launched, localhost beside 127.0.0.1), and compares
the code it returns with what ``dtfkit.diagnose`` finds. Plain Python: no cluster starts.

12.2 (``save_interval``, in ``ch12_recovery``) grades ``choose_save_every(...)`` against the
cost model of checkpointing under a loss budget, then runs the learner's interval for real
with both workers dying at the worst moment.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable

from dtfkit.course.check._core import CheckResult, exercise, failed, passed
from dtfkit.course.check.ch12_recovery import check_12_2 as save_interval  # noqa: F401 - exercise 12.2
from dtfkit.diagnosis import diagnose
from dtfkit.i18n import N_, _

# The kinds the chapter's text shows; hidden=True adds the others.
SHOWN = (
    "task-index-out-of-range",
    "duplicate-task",
    "never-launched",
    "clusters-disagree",
    "address-no-port",
    "task-type-not-in-cluster",
)
HIDDEN = (
    "duplicate-address",
    "address-scheme",
    "address-bad-port",
    "several-chiefs",
    "localhost-multi-machine",
    "missing-task",
    "missing-cluster",
    "unknown-job",
    "chief-and-master",
)
# Jobs the rules above would misjudge if applied too broadly, in the hidden tests only: the answer is
# in CODES (an alias of another task's address is a duplicate; the three others are sound jobs).
TRAPS = (
    "loopback-alias",
    "sound-evaluator-never-launched",
    "sound-evaluator-outside-cluster",
    "sound-loopback-spellings",
)
NO_MISTAKE = "no mistake"
CODES = {
    "loopback-alias": "duplicate-address",
    "sound-evaluator-never-launched": NO_MISTAKE,
    "sound-evaluator-outside-cluster": NO_MISTAKE,
    "sound-loopback-spellings": NO_MISTAKE,
}
CASES, HIDDEN_CASES = 12, 62  # drawn fresh every run: no fixed seeds a learner could enumerate

# A question for each mistake that points where to look without naming it.
_LOOK = {  # translated where shown: _(_LOOK[kind])
    "task-index-out-of-range": N_(
        "compare each process's task index with the number of addresses its job has"
    ),
    "duplicate-task": N_("which task does each process say it is? list them side by side"),
    "never-launched": N_("for every address in the cluster, is there a process that says it is that task?"),
    "clusters-disagree": N_("put the 'cluster' of each process next to the others': are they all the same?"),
    "address-no-port": N_("read every address in the cluster: what must follow the host?"),
    "task-type-not-in-cluster": N_(
        "is each process's task type one of the cluster's job names, spelled the same?"
    ),
    "duplicate-address": N_("can two servers listen on the same host and port?"),
    "address-scheme": N_("read every address in the cluster: is it only host and port?"),
    "address-bad-port": N_("read every address's port: is it a number a port can be?"),
    "several-chiefs": N_("how many tasks may the coordinating job have?"),
    "localhost-multi-machine": N_("which machine does each address name, from where it is dialled?"),
    "missing-task": N_("does every TF_CONFIG have both keys a process needs?"),
    "missing-cluster": N_("does every TF_CONFIG have both keys a process needs?"),
    "unknown-job": N_("which job names do TensorFlow's strategies accept?"),
    "chief-and-master": N_("how many jobs in this cluster coordinate the others?"),
    NO_MISTAKE: N_(
        "TensorFlow accepts this job: does the rule that made you answer apply to every job, and "
        "to every way of writing one machine's address?"
    ),
}


def _layout(rng: random.Random) -> dict[str, list[str]]:
    jobs = rng.choice([("worker",), ("ps", "worker"), ("chief", "ps", "worker"), ("chief", "worker")])
    counts = {"chief": 1, "ps": rng.randint(1, 2), "worker": rng.randint(2, 4)}
    hosts = rng.random() < 0.5
    port = rng.randrange(2000, 30000, 10)
    cluster: dict[str, list[str]] = {}
    k = 0
    for job in jobs:
        cluster[job] = []
        for _task in range(counts[job]):
            address = f"node-{k}.example.com:{port}" if hosts else f"localhost:{port + k}"
            cluster[job].append(address)
            k += 1
    return cluster


def _processes(cluster: dict[str, list[str]]) -> list[dict]:
    return [
        {"cluster": cluster, "task": {"type": job, "index": i}}
        for job, tasks in cluster.items()
        for i in range(len(tasks))
    ]


def _retarget(cluster: dict[str, list[str]], job: str, index: int, address: str) -> dict[str, list[str]]:
    changed = copy.deepcopy(cluster)
    changed[job][index] = address
    return changed


def _any_task(rng: random.Random, cluster: dict[str, list[str]]) -> tuple[str, int]:
    job = rng.choice(list(cluster))
    return job, rng.randrange(len(cluster[job]))


def _break(kind: str, rng: random.Random, cluster: dict[str, list[str]]) -> list[dict]:
    """Every process of ``cluster``, with one mistake of ``kind`` made in them."""
    job, index = _any_task(rng, cluster)
    address = cluster[job][index]
    host, port = address.rsplit(":", 1)
    configs = _processes(cluster)
    if kind == "task-index-out-of-range":
        configs.append({"cluster": cluster, "task": {"type": job, "index": len(cluster[job])}})
    elif kind == "duplicate-task":
        configs.append({"cluster": cluster, "task": {"type": job, "index": index}})
    elif kind == "never-launched":
        configs = [c for c in configs if c["task"] != {"type": job, "index": index}]
    elif kind == "clusters-disagree":
        other = _retarget(cluster, job, index, f"{host}:{int(port) + 5000}")
        victim = rng.randrange(len(configs))
        configs[victim] = {"cluster": other, "task": configs[victim]["task"]}
    elif kind == "task-type-not-in-cluster":
        missing = [j for j in ("chief", "ps", "evaluator") if j not in cluster and j != "evaluator"]
        wrong = rng.choice([*missing, job.capitalize(), job + "s"])
        configs.append({"cluster": cluster, "task": {"type": wrong, "index": 0}})
    elif kind in ("address-no-port", "address-scheme", "address-bad-port", "duplicate-address"):
        broken = {
            "address-no-port": host,
            "address-scheme": f"grpc://{address}",
            "address-bad-port": f"{host}:{rng.choice(['22o2', '70000', '0', '-1'])}",
            "duplicate-address": _another_address(cluster, address),
        }[kind]
        configs = _processes(_retarget(cluster, job, index, broken))
    elif kind == "several-chiefs":
        grown = copy.deepcopy(cluster)
        chiefs = grown.setdefault("chief", [])
        chiefs += [_fresh_address(cluster, n) for n in range(2 - len(chiefs))]
        configs = _processes(grown)
    elif kind == "localhost-multi-machine":
        spread = {j: [f"node-{j}-{i}.example.com:2222" for i in range(len(t))] for j, t in cluster.items()}
        configs = _processes(_retarget(spread, job, index, f"localhost:{port}"))
    elif kind == "missing-task":
        del configs[rng.randrange(len(configs))]["task"]
    elif kind == "missing-cluster":
        del configs[rng.randrange(len(configs))]["cluster"]
    elif kind == "unknown-job":
        renamed = {
            ("master" if j == "chief" else j.capitalize() if j == job else j): t for j, t in cluster.items()
        }
        configs = _processes(renamed)
    elif kind == "chief-and-master":
        both = {"chief": [_fresh_address(cluster, 0)], "master": [_fresh_address(cluster, 1)], **cluster}
        configs = _processes(both)
    elif kind in ("loopback-alias", "sound-loopback-spellings"):
        # One machine's loopback, spelled two ways: localhost and 127.0.0.1 are the same place.
        local = _on_loopback(rng, cluster)
        if kind == "loopback-alias":
            alias = _another_address(local, local[job][index])
            local = _retarget(local, job, index, "127.0.0.1:" + alias.rsplit(":", 1)[1])
        configs = _processes(local)
    elif kind == "sound-evaluator-never-launched":
        # The evaluator is outside the training: nobody waits for it, so a job may start it later or never.
        configs = _processes({**cluster, "evaluator": [_fresh_address(cluster, 0)]})
        configs = [c for c in configs if c["task"]["type"] != "evaluator"]
    elif kind == "sound-evaluator-outside-cluster":
        # TensorFlow accepts an evaluator that is not in the cluster (multi_worker_util._validate_cluster_spec).
        configs.append({"cluster": cluster, "task": {"type": "evaluator", "index": 0}})
    else:
        raise ValueError(f"no such kind {kind!r}")
    rng.shuffle(configs)
    return configs


def _fresh_address(cluster: dict[str, list[str]], n: int) -> str:
    """An address no task of ``cluster`` has, on the same kind of host (loopback or a hostname)."""
    addresses = [a for tasks in cluster.values() for a in tasks]
    if addresses[0].startswith("localhost:"):
        return f"localhost:{max(int(a.rsplit(':', 1)[1]) for a in addresses) + 1 + n}"
    return f"node-new{n}.example.com:2222"


def _another_address(cluster: dict[str, list[str]], address: str) -> str:
    return next(a for tasks in cluster.values() for a in tasks if a != address)


def _on_loopback(rng: random.Random, cluster: dict[str, list[str]]) -> dict[str, list[str]]:
    """``cluster`` on one machine, every address on its own port, spelled localhost or 127.0.0.1."""
    port = rng.randrange(2000, 30000, 10)
    out: dict[str, list[str]] = {}
    k = 0
    for job, tasks in cluster.items():
        out[job] = []
        for _task in tasks:
            out[job].append(f"{rng.choice(['localhost', '127.0.0.1'])}:{port + k}")
            k += 1
    flat = [a for tasks in out.values() for a in tasks]
    if all(a.startswith("localhost") for a in flat) or all(a.startswith("127.") for a in flat):
        first = next(iter(out))
        spelled = "127.0.0.1" if flat[0].startswith("localhost") else "localhost"
        out[first][0] = f"{spelled}:{port}"  # both spellings, whatever the draw
    return out


def broken_clusters(hidden: bool = False, rng: random.Random | None = None) -> list[tuple[list[dict], str]]:
    """The check's cases: ``(tf_configs, code)``, one mistake each (hidden: also the TRAPS, among them
    sound jobs, whose code is ``"no mistake"``); drawn from ``rng`` (by default a generator seeded from
    the operating system: new cases every run)."""
    rng = rng if rng is not None else random.Random()
    kinds = SHOWN + (HIDDEN + TRAPS if hidden else ())
    cases = []
    for n in range(HIDDEN_CASES if hidden else CASES):
        kind = kinds[n % len(kinds)]
        code = CODES.get(kind, kind)
        want = {code} if code != NO_MISTAKE else set()
        for _attempt in range(20):  # a draw diagnose reads otherwise is the generator's slip: draw again
            configs = _break(kind, rng, _layout(rng))
            codes = diagnose(configs).codes
            if codes == want:
                break
        else:
            raise AssertionError(f"20 draws of {kind!r} in a row, and diagnose finds {sorted(codes)}")
        cases.append((configs, code))
    return cases


@exercise("12.1", "Find the broken TF_CONFIG", reads=("tf_configs",), varies=N_("broken clusters"))
def broken_config(find_mistake: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``find_mistake(tf_configs)`` (a mistake's code) with ``dtfkit.diagnose`` on lists
    of TF_CONFIGs with one mistake each, the chapter's kinds (and, hidden, others).

    Example::

        check.ch12.broken_config(find_mistake)
    """
    cases = broken_clusters(hidden)
    for configs, want in cases:
        got = find_mistake(copy.deepcopy(configs))
        if got == want:
            continue
        shown = [json.dumps(c) for c in configs]
        if not isinstance(got, str):
            return failed(
                _("find_mistake returned {got!r}, not a code").format(got=got),
                _("return the mistake's code as a string"),
                *shown,
            )
        codes = (*SHOWN, *HIDDEN, NO_MISTAKE)
        if got not in codes and got:
            return failed(
                _("find_mistake returned {got!r}, which is not one of the codes the chapter lists").format(
                    got=got
                ),
                _("return one of the codes of the table in the chapter, spelled as there"),
                *shown,
            )
        verdict = _("TensorFlow accepts them") if want == NO_MISTAKE else _("that is not their mistake")
        return failed(
            _("for these {len_configs} TF_CONFIGs you said {got!r}, but {verdict}").format(
                len_configs=len(configs), got=got, verdict=verdict
            ),
            _(_LOOK[want]),
            *shown,
        )
    kinds = sorted({kind for _, kind in cases} - {NO_MISTAKE})
    sound = sum(code == NO_MISTAKE for _, code in cases)
    return passed(
        _("find_mistake named the one mistake in {broken} broken clusters of {kinds} kinds").format(
            broken=len(cases) - sound, kinds=len(kinds)
        )
        + (
            _(", with kinds the text never shows, and found none in {sound} sound ones").format(sound=sound)
            if hidden
            else ""
        )
    )
