"""Check what ``dtfkit.diagnose`` is given before any rule reads it: the wrong type, a size no
real cluster has, or nothing at all gets a ``DiagnoseInputError`` that names the argument and
the next step, at once and in bounded memory.

Example::

    machine_count("node-a")      # DiagnoseInputError: machines='node-a' is one hostname ...
    describe([[[[1]]]])          # '[[[[...]]]]' (never deeper than a few levels)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dtfkit.errors import DtfkitError
from dtfkit.shown import repr_cutter

# Bounds far above any real cluster, low enough that reading stays well under a second.
MAX_TEXT = 16 * 1024 * 1024  # characters (or bytes) of one TF_CONFIG text or one log
MAX_PROCESSES = 10_000  # TF_CONFIGs in one list
MAX_TASKS = 20_000  # tasks in one cluster (and in all the distinct clusters the rules check)
MAX_ADDRESSES = 200_000  # addresses read in all the TF_CONFIGs of one call
MAX_MACHINES = 100_000
MAX_LOGS = 10_000  # tasks in one logs mapping

# A short repr of any value: bounded in length and depth, never recursing without end.
describe = repr_cutter(maxlevel=3, maxstring=60, maxother=60, maxlist=4, maxtuple=4, maxdict=4, maxset=4)


class DiagnoseInputError(DtfkitError, ValueError, TypeError):
    """``diagnose`` was given an argument it cannot read (a wrong type, a size no cluster has, or
    nothing at all). The message names the argument and says what to pass instead. It is a
    ``ValueError`` and a ``TypeError``, so either ``except`` catches it.

    Example::

        try:
            dtfkit.diagnose(None)
        except DiagnoseInputError as error:
            print(error)      # diagnose was given nothing to diagnose: ...
    """


def a_type(value: Any) -> str:
    """``'an int'``, ``'a str'``: the type of ``value`` with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def nothing_to_diagnose(given: str = "tf_config is None") -> DiagnoseInputError:
    return DiagnoseInputError(
        f"diagnose was given nothing to diagnose: {given} and neither cluster= nor logs= was "
        "given. (os.environ.get('TF_CONFIG') is None when TF_CONFIG is not set in this process: then "
        "TensorFlow runs the process alone, as a cluster of one.) Next: set TF_CONFIG and pass it "
        "(its dict or JSON text, or a list: one per process), or pass cluster=your_LocalCluster or "
        "logs={'worker:0': text}."
    )


def check_text_size(argument: str, text: str | bytes | bytearray) -> None:
    if len(text) > MAX_TEXT:
        raise DiagnoseInputError(
            f"{argument} is {len(text):,} characters long; diagnose reads at most {MAX_TEXT:,} (a TF_CONFIG "
            "is a few kB, a task's log rarely more than a few MB). Next: pass the TF_CONFIG itself, or "
            "the last part of the log (its error and the lines before it)."
        )


def check_count(argument: str, count: int, limit: int, what: str) -> None:
    if count > limit:
        raise DiagnoseInputError(
            f"{argument} has {count:,} {what}; diagnose reads at most {limit:,}, more than a real cluster "
            "has. Next: pass what describes the cluster you run (its TF_CONFIGs, its hostnames, its "
            "tasks' logs); if it really is this large, check a part of it at a time."
        )


def machine_count(machines: Any) -> int:
    """How many machines ``machines`` names (0 for None), or a ``DiagnoseInputError``."""
    if machines is None:
        return 0
    if isinstance(machines, bool) or isinstance(machines, float):
        raise DiagnoseInputError(
            f"machines={describe(machines)} is {a_type(machines)}, not a count of machines. Next: pass a "
            "whole number (machines=2) or the machines' hostnames (machines=['node-a', 'node-b'])."
        )
    if isinstance(machines, int):
        if not 1 <= machines <= MAX_MACHINES:
            raise DiagnoseInputError(
                f"machines={describe(machines)} is not a number of machines (1 to {MAX_MACHINES:,}). Next: pass "
                "how many machines the cluster's tasks run on, e.g. machines=2."
            )
        return machines
    if isinstance(machines, (str, bytes)):
        raise DiagnoseInputError(
            f"machines={describe(machines)} is one hostname, and diagnose would count its characters. "
            f"Next: pass a list of hostnames (machines=[{describe(machines)}, ...]) or a count "
            "(machines=2)."
        )
    if isinstance(machines, Mapping) or not isinstance(machines, Iterable):
        raise DiagnoseInputError(
            f"machines={describe(machines)} is {a_type(machines)}, not a count or a list of "
            "hostnames. Next: pass machines=2 or machines=['node-a', 'node-b']."
        )
    names = []
    for name in machines:
        if not isinstance(name, str) or not name:
            raise DiagnoseInputError(
                f"machines holds {describe(name)}, which is not a hostname. Next: pass the machines' "
                "hostnames as strings (machines=['node-a', 'node-b']) or their count (machines=2)."
            )
        names.append(name)
        check_count("machines", len(names), MAX_MACHINES, "machines")
    if not names:
        raise DiagnoseInputError(
            "machines is empty. Next: pass the machines' hostnames (machines=['node-a', 'node-b']), "
            "their count (machines=2), or leave machines out."
        )
    return len(set(names))


def check_strategy(strategy: Any) -> None:
    if strategy is not None and not isinstance(strategy, str):
        raise DiagnoseInputError(
            f"strategy={describe(strategy)} is {a_type(strategy)}, not a strategy's name. Next: pass "
            "strategy='mwms' (MultiWorkerMirroredStrategy) or strategy='ps' (ParameterServerStrategy)."
        )


def check_cluster(cluster: Any) -> None:
    """``cluster=`` must be a ``LocalCluster`` (anything with its ``closed``, ``status`` and ``logs``)."""
    if not all(hasattr(cluster, name) for name in ("closed", "status", "logs")):
        hint = (
            " To check a ClusterSpec dict or a TF_CONFIG, pass it as the first argument: diagnose(spec)."
            if isinstance(cluster, (Mapping, str, bytes, list, tuple))
            else ""
        )
        raise DiagnoseInputError(
            f"cluster={describe(cluster)} is {a_type(cluster)}, not a LocalCluster.{hint} Next: pass "
            "cluster=the LocalCluster you started (diagnose reads its tasks' states and logs)."
        )


def check_logs(logs: Any) -> None:
    """``logs=`` must be task texts by task name, one exception, or one text."""
    if isinstance(logs, (str, bytes, bytearray)):
        check_text_size("logs", logs)
        return
    if isinstance(logs, BaseException):
        return
    if not isinstance(logs, Mapping):
        raise DiagnoseInputError(
            f"logs={describe(logs)} is {a_type(logs)}, not task logs. Next: pass "
            "logs={'worker:0': text, ...}, one log text, or the error cluster.run raised."
        )
    check_count("logs", len(logs), MAX_LOGS, "tasks")
    for task, text in logs.items():
        if not isinstance(task, str) or len(task) > 200:
            raise DiagnoseInputError(
                f"logs has the key {describe(task)}, not a task name. Next: key each log by its task, "
                "e.g. logs={'worker:0': text}."
            )
        if isinstance(text, (str, bytes, bytearray)):
            check_text_size(f"logs[{task!r}]", text)
        elif not isinstance(text, BaseException):
            raise DiagnoseInputError(
                f"logs[{describe(task)}] is {a_type(text)}, not a log text. Next: pass what the task "
                "printed as a str (cluster.logs(task, everything=True)) or the exception it raised."
            )
