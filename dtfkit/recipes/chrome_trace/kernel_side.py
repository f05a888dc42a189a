"""Runs in the notebook kernel: traced steps as a Chrome trace file, and the check of such a file.

Never imports TensorFlow; this recipe has no task side: it works on what runs returned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dtfkit.recipes.timeline import check_records, step_layout, tasks_of
from dtfkit.recipes.timeline.task_side import _is_number
from dtfkit.shown import shown

# The phases the Trace Event Format defines.
PHASES = frozenset("BEXiICbnesStTpfPNODMVvRc()") | {"F"}
_METADATA = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}
_THREADS = ("compute", "receive", "send")


def _lanes(spans: list[tuple[float, float, Any]]) -> list[list[Any]]:
    """Put spans into as few lanes as possible, none overlapping another in its lane."""
    lanes: list[list[Any]] = []
    ends: list[float] = []
    for start, end, item in sorted(spans, key=lambda s: (s[0], s[1])):
        free = next((i for i, e in enumerate(ends) if e <= start), None)
        if free is None:
            lanes.append([])
            ends.append(end)
            free = len(lanes) - 1
        lanes[free].append(item)
        ends[free] = end
    return lanes


def _event(record: dict[str, Any], offset: float, pid: int, tid: int, cat: str) -> dict[str, Any]:
    ts = offset + record["start_us"]
    event = {"name": "", "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": ts}
    event["dur"] = record["end_us"] - record["start_us"]
    if cat == "compute":
        event["name"] = record["name"]
        event["args"] = {"step": record["step"], "op": record["op"], "task": record["task"]}
    else:
        event["name"] = f"{record['tensor']} ({record['bytes']} B)"
        event["args"] = {
            "step": record["step"],
            "sender": record["from"],
            "receiver": record["to"],
            "tensor": record["tensor"],
            "bytes": record["bytes"],
            "ready_ts": offset + record["ready_us"],
            "timed_by": record.get("timed_by", ""),
        }
    return event


def to_chrome_trace(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Records of ``timeline.step_records`` (``allreduce.trace_steps``) as a Chrome trace (a dict).

    >>> trace = to_chrome_trace([
    ...     {"step": 0, "kind": "compute", "task": "ps:0", "name": "ps_sum", "op": "AddN", "start_us": 5, "end_us": 9},
    ...     {"step": 0, "kind": "transfer", "from": "worker:0", "to": "ps:0", "tensor": "Identity",
    ...      "bytes": 4800, "ready_us": 0, "start_us": 1, "end_us": 4},
    ... ])
    >>> check_chrome_trace(trace)["processes"]
    {0: 'steps', 1: 'ps:0', 2: 'worker:0'}
    >>> [(e["pid"], e["tid"], e["name"]) for e in trace["traceEvents"] if e["ph"] == "X"]
    [(0, 0, 'step 0'), (1, 1, 'ps_sum'), (1, 2, 'Identity (4800 B)'), (2, 1, 'Identity (4800 B)')]
    """
    records = check_records(records, times=True, sizes=True)
    layout = step_layout(records)
    events: list[dict[str, Any]] = []

    def name(kind: str, pid: int, tid: int, value: Any) -> None:
        key = _METADATA[kind]
        events.append({"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}})

    name("process_name", 0, 0, "steps")
    name("process_sort_index", 0, 0, 0)
    name("thread_name", 0, 0, "steps")
    for step, (offset, span) in layout.items():
        events.append(
            {"name": f"step {step}", "cat": "step", "ph": "X", "pid": 0, "tid": 0, "ts": offset, "dur": span}
        )
    for pid, task in enumerate(tasks_of(records), start=1):
        name("process_name", pid, 0, task)
        name("process_sort_index", pid, 0, pid)
        mine = {
            "compute": [r for r in records if r["kind"] == "compute" and r["task"] == task],
            "receive": [r for r in records if r["kind"] == "transfer" and r["to"] == task],
            "send": [r for r in records if r["kind"] == "transfer" and r["from"] == task],
        }
        tid = 0
        for thread in _THREADS:
            spans = []
            for r in mine[thread]:
                offset = layout[r["step"]][0]
                spans.append((offset + r["start_us"], offset + r["end_us"], r))
            for lane, lane_records in enumerate(_lanes(spans)):
                tid += 1
                name("thread_name", pid, tid, thread if lane == 0 else f"{thread} {lane + 1}")
                name("thread_sort_index", pid, tid, tid)
                for r in lane_records:
                    events.append(_event(r, layout[r["step"]][0], pid, tid, thread))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": "dtfkit step_records"}}


def write_chrome_trace(records: Iterable[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write ``to_chrome_trace(records)`` as JSON to ``path``, checked first; returns the path.

    Example::

        write_chrome_trace(records, "ring_steps.json")    # open in https://ui.perfetto.dev
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"path must be a file name such as 'ring_steps.json', not {shown(path)}")
    trace = to_chrome_trace(records)
    check_chrome_trace(trace)
    path = Path(path)
    try:
        path.write_text(json.dumps(trace, allow_nan=False))
    except OSError as err:
        raise ValueError(
            f"path: cannot write {shown(os.fspath(path))} ({err.strerror or err}); pick a file in a folder "
            "that exists and that you may write to, such as 'ring_steps.json'"
        ) from None
    return path


def _problem(event: dict[str, Any]) -> str | None:
    """What makes one event invalid, or None."""
    ph = event.get("ph")
    if not isinstance(ph, str) or ph not in PHASES:
        return f"'ph' must be one of the Trace Event Format's phases ({''.join(sorted(PHASES))}), not {ph!r}"
    if not isinstance(event.get("name"), str) and ph != "E":
        return f"'name' must be a string, not {event.get('name')!r}"
    for key in ("pid", "tid"):
        if key in event and not (isinstance(event[key], int) and not isinstance(event[key], bool)):
            return f"{key!r} must be an integer, not {event[key]!r}"
    if "pid" not in event:
        return "'pid' is missing"
    if "args" in event and not isinstance(event["args"], dict):
        return f"'args' must be an object, not {event['args']!r}"
    if ph == "M":
        arg = _METADATA.get(event["name"])
        if arg is None:
            return f"metadata event name must be one of {sorted(_METADATA)}, not {event['name']!r}"
        if arg not in event.get("args", {}):
            return f"a {event['name']} event needs args.{arg}"
        return None
    if not _is_number(event.get("ts")):
        return f"'ts' must be a finite number (microseconds), not {event.get('ts')!r}"
    if ph == "X":
        if "tid" not in event:
            return "'tid' is missing"
        if not _is_number(event.get("dur")) or event["dur"] < 0:
            return f"'dur' must be a finite number >= 0, not {event.get('dur')!r}"
    return None


def _overlap(events: list[tuple[int, dict[str, Any]]]) -> tuple[int, int] | None:
    """Complete events of one thread must nest or follow one another: the first pair that overlaps."""
    stack: list[tuple[int, float]] = []
    for i, event in sorted(events, key=lambda e: (e[1]["ts"], -e[1]["dur"])):
        end = event["ts"] + event["dur"]
        while stack and stack[-1][1] <= event["ts"] + 1e-6:
            stack.pop()
        if stack and end > stack[-1][1] + 1e-6:
            return stack[-1][0], i
        stack.append((i, end))
    return None


TRACE_FORM = (
    "a Chrome trace: a dict with a 'traceEvents' list, a list of events, a JSON file's path "
    "(what write_chrome_trace wrote) or JSON text"
)
# Longer than any path the system takes (PATH_MAX on Linux): text this long is no file name.
_MAX_PATH = 4096


def _load(trace: Any) -> Any:
    """``trace`` as JSON data: a dict or list as it is; a string starting with ``{`` or ``[``
    as JSON text; another string or path as a file to read. ``ValueError`` saying what is expected."""
    if isinstance(trace, (bytes, bytearray)):
        raise ValueError(f"trace must be {TRACE_FORM}, not bytes: decode them first (data.decode())")
    if isinstance(trace, (dict, list)):
        return trace
    if not isinstance(trace, (str, os.PathLike)):
        raise ValueError(f"trace must be {TRACE_FORM}, not {shown(trace)}")
    text, source = None, None
    if isinstance(trace, str) and trace.lstrip()[:1] in ("{", "["):
        text, source = trace, "the JSON text given"
    else:
        name = os.fspath(trace)
        if not isinstance(name, str) or not name or len(name) > _MAX_PATH or "\0" in name:
            raise ValueError(f"trace must be {TRACE_FORM}; {shown(trace)} is none of them")
        try:
            text, source = Path(name).read_text(encoding="utf-8"), name
        except FileNotFoundError:
            raise ValueError(
                f"trace: there is no file {shown(name)}; pass {TRACE_FORM} "
                "(chrome_trace.write_chrome_trace(records, path) writes one)"
            ) from None
        except UnicodeDecodeError:
            raise ValueError(
                f"trace: {shown(name)} is not a text file; a Chrome trace is JSON text"
            ) from None
        except OSError as err:
            raise ValueError(
                f"trace: {shown(name)} cannot be read ({err.strerror or err}); pass {TRACE_FORM}"
            ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{source} is not JSON ({err}); write it with write_chrome_trace") from None
    except RecursionError:
        raise ValueError(f"{source} is JSON nested too deeply to be a Chrome trace") from None


def check_chrome_trace(trace: dict | list | str | os.PathLike) -> dict[str, Any]:
    """Check a Chrome trace (a dict, a list of events, a JSON file's path, or JSON text)
    against the Trace Event Format; raise ``ValueError`` naming the first bad event and why.

    Checks: the JSON shape (an object with a ``traceEvents`` list, or a list), each event's
    ``ph`` (a known phase), ``name``, integer ``pid``/``tid``, a finite ``ts``, for ``"X"``
    a ``tid`` and a finite ``dur >= 0``, metadata events' names and args, that it is plain
    JSON (no NaN), and that the complete events of one thread nest (a viewer draws an
    overlapping one wrongly). Returns ``events`` (how many), ``phases`` (how many of each)
    and ``processes`` (pid → name).

    >>> check_chrome_trace({"traceEvents": [{"name": "op", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -1}]})
    Traceback (most recent call last):
    ...
    ValueError: Chrome trace event 0 ({'dur': -1, 'name': 'op', 'ph': 'X', 'pid': 1, 'tid': 1, 'ts': 0}): 'dur' must be a finite number >= 0, not -1
    """
    trace = _load(trace)
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise ValueError(
            "a Chrome trace is an object with a 'traceEvents' list, or a list of events; "
            f"got {type(trace).__name__} with traceEvents={shown(events)}"
        )
    try:
        json.dumps(trace, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"a Chrome trace must be plain JSON: {shown(str(err))}") from None
    except RecursionError:
        raise ValueError("a Chrome trace must be plain JSON, and this one is nested too deeply") from None
    phases: dict[str, int] = {}
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], list[tuple[int, dict[str, Any]]]] = {}
    for i, event in enumerate(events):
        problem = "it is not an object" if not isinstance(event, dict) else _problem(event)
        if problem:
            raise ValueError(f"Chrome trace event {i} ({shown(event)}): {problem}")
        phases[event["ph"]] = phases.get(event["ph"], 0) + 1
        if event["ph"] == "M" and event["name"] == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        if event["ph"] == "X":
            threads.setdefault((event["pid"], event["tid"]), []).append((i, event))
    for (pid, tid), mine in threads.items():
        pair = _overlap(mine)
        if pair:
            a, b = pair
            raise ValueError(
                f"Chrome trace event {b} ({shown(events[b])}) overlaps event {a} ({shown(events[a])}) "
                f"on pid {pid}, tid {tid} without nesting in it: give one of them another tid"
            )
    return {"events": len(events), "phases": dict(sorted(phases.items())), "processes": processes}
