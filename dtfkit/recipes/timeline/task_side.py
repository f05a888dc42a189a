"""Runs inside the tasks: ``step_records``: one traced step's compute and transfer records, read in the task
from its ``RunMetadata``; and what both sides use on such records: ``check_records`` and ``link_bytes``
(compression's task side counts its bytes with it).

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from dtfkit.recipes.placement import task_side as placement
from dtfkit.shown import shown

# What the executor adds to every partition, and the RPC pseudo-op of a transfer: not compute.
_NOT_COMPUTE = ("_SOURCE", "_SINK", "RecvTensor", "_Send", "_Recv", "_HostSend", "_HostRecv")


# ------------------------------------------------------------------------ in a task
def step_records(run_metadata: Any, step: int = 0) -> list[dict[str, Any]]:
    """Compute and transfer records of one traced run (see the module docstring).

    ``run_metadata`` must come from a run with partition graphs (``placement.trace_options()``):
    they list every tensor that crossed tasks, with its size. The executor keeps no step
    stats for ``_Send``/``_Recv``, so a transfer is timed by the ``RecvTensor`` call the
    receiver logged (``placement.recv_tensor_log``), from when the tensor was ready, and
    else (the log is best effort) from its sender's producing op to the first op that used
    it: ``"timed_by"`` says which (``"rpc"`` or ``"ops"``). ``used_us`` is when the first
    op that used it started (``None`` if none did).

    Example (in a task)::

        metadata = tf.compat.v1.RunMetadata()
        sess.run(train_op, options=placement.trace_options(), run_metadata=metadata)
        records = step_records(metadata, step=0)
    """
    if not _is_count(step):
        raise ValueError(f"step must be an integer >= 0 (the step's number), not {shown(step)}")
    if not hasattr(run_metadata, "step_stats"):
        raise ValueError(
            f"run_metadata must be the tf.compat.v1.RunMetadata a traced run filled in "
            f"(sess.run(..., options=placement.trace_options(), run_metadata=metadata)), not {shown(run_metadata)}"
        )
    stats = {
        (dev.device, node.node_name): node
        for dev in run_metadata.step_stats.dev_stats
        for node in dev.node_stats
    }
    if not stats:
        return []
    t0 = min(node.all_start_micros for node in stats.values())
    out: list[dict[str, Any]] = []
    first_use: dict[tuple[str, str], int] = {}  # (device, input op) -> when its first consumer started
    for (device, name), node in stats.items():
        kernel = placement.kernel_of(node.timeline_label)
        if name in _NOT_COMPUTE or kernel in _NOT_COMPUTE:
            continue
        start = node.all_start_micros - t0
        for source in _inputs(node.timeline_label):
            first_use[(device, source)] = min(start, first_use.get((device, source), start))
        out.append(
            {
                "step": step,
                "kind": "compute",
                "task": placement.short_task(device),
                "name": name,
                "op": kernel or name,
                "start_us": start,
                "end_us": start + node.all_end_rel_micros,
            }
        )
    rpcs = placement.recv_tensor_log(run_metadata)
    for row in placement.transfer_table(run_metadata, nodes=True):
        if row["kind"] != "edge":
            continue  # a feed or fetch: the client's side, not a task
        timing = _transfer_timing(
            stats.get((row["from_device"], row["tensor"])),
            rpcs.get((row["tensor"], row["from"], row["to"])),
            first_use.get((row["to_device"], row["recv_node"])),
            t0,
        )
        out.append(
            {
                "step": step,
                "kind": "transfer",
                "from": row["from"],
                "to": row["to"],
                "tensor": row["tensor"],
                "bytes": int(row["bytes"] or 0),
                **timing,
            }
        )
    out.sort(key=lambda r: (r["start_us"], r["kind"], r.get("task", r.get("to", ""))))
    return out


def _inputs(label: str) -> list[str]:
    """The ops a timeline label ("name = Op(a, b:1, ^c)") names as data inputs."""
    _, sep, rest = label.partition(" = ")
    args = rest.partition("(")[2].rpartition(")")[0] if sep else ""
    return [a.strip().split(":")[0] for a in args.split(",") if a.strip() and not a.strip().startswith("^")]


def _transfer_timing(producer: Any, rpc: dict | None, used: int | None, t0: int) -> dict[str, Any]:
    """When a tensor was ready, went and arrived, from what the trace has."""
    ready = None
    if producer is not None:
        ready = producer.all_start_micros - t0 + (producer.op_end_rel_micros or producer.all_end_rel_micros)
    if rpc is not None:
        asked, end = rpc["start_micros"] - t0, rpc["end_micros"] - t0
        # the receiver asks at once; the sender answers when the tensor is ready
        start, timed_by = (asked if ready is None else max(asked, ready)), "rpc"
    else:
        start, end, timed_by = ready, used, "ops"
    start = end if start is None else start
    end = start if end is None else end
    # tasks on other machines have other clocks: never start a transfer after it ended
    start = min(start, end) if start is not None else None
    ready = start if ready is None else ready
    return {"ready_us": ready, "start_us": start, "end_us": end, "used_us": used, "timed_by": timed_by}


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ------------------------------------------------------- plain Python (no TensorFlow)
# More records than any trace a notebook reads (a step of a few workers is tens of records,
# trace_steps takes at most 1000 steps): the check stops there instead of filling memory.
MAX_RECORDS = 1_000_000
RECORD_FORM = (
    "a list of the dicts allreduce.trace_steps returns (timeline.step_records): "
    "{'step', 'kind': 'compute', 'task', 'start_us', 'end_us', ...} or "
    "{'step', 'kind': 'transfer', 'from', 'to', 'bytes', 'start_us', 'end_us', ...}"
)


def check_records(
    records: Any, *, steps: bool = True, times: bool = False, sizes: bool = False, argument: str = "records"
) -> list[dict[str, Any]]:
    """``records`` as a list, each one checked for what the caller reads; ``ValueError`` naming
    the first bad record and what a record is (a dict from ``cluster.run``, a string, a
    JSON file's path or a record without a key would fail later with a bare ``TypeError``
    or ``KeyError``).

    ``steps``: each has an integer ``step`` >= 0; ``times``: finite ``start_us`` <=
    ``end_us``; ``sizes``: each transfer's ``bytes`` is an integer >= 0.

    >>> check_records({"client:0": []})
    Traceback (most recent call last):
    ...
    ValueError: records must be a list of records, not a dict keyed by task ('client:0'): cluster.run returns one; pass its value, e.g. next(iter(result.values()))
    """
    if isinstance(records, dict):
        if "kind" in records:
            raise ValueError(f"{argument} must be a list of records, not one record: pass [record]")
        keys = ", ".join(shown(k) for k in list(records)[:3])
        raise ValueError(
            f"{argument} must be a list of records, not a dict keyed by task ({keys}): cluster.run "
            "returns one; pass its value, e.g. next(iter(result.values()))"
        )
    if isinstance(records, (str, bytes, bytearray)) or not isinstance(records, Iterable):
        raise ValueError(f"{argument} must be {RECORD_FORM}; not {shown(records)}")
    checked = list(itertools.islice(records, MAX_RECORDS + 1))
    if len(checked) > MAX_RECORDS:
        raise ValueError(
            f"{argument} holds more than {MAX_RECORDS:,} records, more than any trace to read: "
            "trace fewer steps (allreduce.trace_steps(..., steps=3))"
        )
    for i, record in enumerate(checked):
        problem = _record_problem(record, steps, times, sizes)
        if problem:
            raise ValueError(
                f"{argument}[{i}] ({shown(record)}): {problem}; {argument} must be {RECORD_FORM}"
            )
    return checked


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _record_problem(record: Any, steps: bool, times: bool, sizes: bool) -> str | None:
    """What makes one record unreadable for the caller, or None."""
    if not isinstance(record, dict):
        return "it is not a dict"
    kind = record.get("kind")
    if kind not in ("compute", "transfer"):
        return f"'kind' must be 'compute' or 'transfer', not {shown(kind)}"
    for key in ("task",) if kind == "compute" else ("from", "to"):
        if not isinstance(record.get(key), str):
            return (
                f"a {kind} record needs {key!r}, a task name such as 'worker:0', not {shown(record.get(key))}"
            )
    if steps and not _is_count(record.get("step")):
        return f"'step' must be an integer >= 0, not {shown(record.get('step'))}"
    if times:
        for key in ("start_us", "end_us"):
            if not _is_number(record.get(key)):
                return f"{key!r} must be a finite number (microseconds), not {shown(record.get(key))}"
        if record["end_us"] < record["start_us"]:
            return f"'end_us' ({record['end_us']}) is before 'start_us' ({record['start_us']})"
    if sizes and kind == "transfer" and not _is_count(record.get("bytes")):
        return f"'bytes' must be an integer >= 0, not {shown(record.get('bytes'))}"
    return None


def link_bytes(records: Iterable[dict[str, Any]]) -> dict[int, dict[tuple[str, str], int]]:
    """Bytes on each link (sender, receiver), per step: compare with ``allreduce.expected_link_bytes``.

    >>> link_bytes([
    ...     {"step": 0, "kind": "transfer", "from": "worker:0", "to": "ps:0", "bytes": 8},
    ...     {"step": 0, "kind": "transfer", "from": "worker:0", "to": "ps:0", "bytes": 4},
    ...     {"step": 1, "kind": "compute", "task": "ps:0"},
    ... ])
    {0: {('worker:0', 'ps:0'): 12}, 1: {}}
    """
    out: dict[int, dict[tuple[str, str], int]] = {}
    for r in check_records(records, sizes=True):
        per_link = out.setdefault(r["step"], {})
        if r["kind"] == "transfer":
            link = (r["from"], r["to"])
            per_link[link] = per_link.get(link, 0) + int(r["bytes"])
    return {step: dict(sorted(links.items())) for step, links in sorted(out.items())}
