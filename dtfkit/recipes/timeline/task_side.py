"""Runs inside the tasks: ``step_records``: one traced step's compute and transfer records, read in the task
from its ``RunMetadata``.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

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
