"""Checks for chapter 1 (ClusterSpec basics: where each op runs).

Example::

    from dtfkit.course import check
    check.ch01.variables_on_worker(build)
    check.ch01.model_parallel(place_layers)
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, ignores, passed
from dtfkit.course.task_side.ch01 import (
    _trace_builds,
    _trace_layers,
)
from dtfkit.recipes import placement

W0, W1 = "/job:worker/task:0", "/job:worker/task:1"
# (variables_on, compute_on): the text's case first, then ones it never names.
BUILD_CASES = ((W1, W0), (W0, W1))
BUILD_HIDDEN = ((W1, W1),)
# (devices, units): one dense layer per device.
LAYER_CASES = (((W0, W1), (32, 10)), ((W1, W0), (16, 10)))
LAYER_HIDDEN = (((W1, W0, W1), (24, 16, 10)),)


def _fresh_layers() -> tuple:
    """A hidden case drawn fresh every run: three layers on both workers, widths no case names
    (distinct, never 64 or 10, so every kernel and bias has a shape of its own)."""
    rng = random.Random()
    first, second = rng.sample([u for u in range(8, 49) if u != 10], 2)
    devices = rng.choice([(W0, W1, W0), (W1, W0, W1), (W0, W0, W1), (W1, W1, W0), (W0, W1, W1), (W1, W0, W0)])
    return ((devices, (first, second, 10)),)


def task_of(device: str) -> str:
    """``"worker:1"`` for ``"/job:worker/task:1"``.

    >>> task_of("/job:worker/task:1")
    'worker:1'
    """
    parts = dict(p.split(":", 1) for p in device.strip("/").split("/") if ":" in p)
    return f"{parts.get('job', '?')}:{parts.get('task', '0')}"


@exercise("1.1", "Variables on a worker")
def variables_on_worker(build: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``build(tf, variables_on, compute_on)`` (returns ``z``) from a separate client on a 1 ps +
    2 workers cluster, for the text's devices and for others (``hidden``: more of them).

    Example::

        check.ch01.variables_on_worker(build)
    """
    problem = ignores(build, ("tf", "variables_on", "compute_on"), "devices")
    if problem is not None:
        return problem
    cases = BUILD_CASES + (BUILD_HIDDEN if hidden else ())
    with cluster(ps=1, workers=2) as c:
        (runs,) = c.run(_trace_builds, args=(build, cases), on="client", timeout=120).values()
    for (variables_on, compute_on), traced in zip(cases, runs, strict=True):
        want_vars, want_z = task_of(variables_on), task_of(compute_on)
        case = f"with variables_on={variables_on!r} and compute_on={compute_on!r}"
        value = np.asarray(traced["value"])
        if value.shape != (2, 2) or not np.allclose(value, 7.0):
            return failed(
                f"{case}, z came out as {value.tolist()}, not [[7, 7], [7, 7]]",
                "z = x + y with x all 3s and y all 4s",
            )
        wrong = [
            f"{v['variable']} on {v['task'] or 'no device'}"
            for v in traced["variables"]
            if v["task"] != want_vars
        ]
        if not traced["variables"] or wrong:
            return failed(
                f"{case}, the variables are not all on {want_vars}: {', '.join(wrong) or 'no variable created'}",
                "a variable lives on the device scope it is created in",
            )
        ran = placement.by_task(traced["ops"])
        if ran.get("ps:0"):
            return failed(
                f"{case}, ps:0 still ran {sorted(ran['ps:0'])}", "nothing should be placed on /job:ps"
            )
        z_task = next((r["task"] for r in traced["ops"] if r["op"] == traced["z_op"]), None)
        if z_task != want_z:
            return failed(
                f"{case}, z was computed on {z_task}, not {want_z}",
                "an op runs on the device scope it is created in, whatever its inputs",
            )
    return passed(
        "x and y lived where variables_on said and z was computed where compute_on said, for the text's "
        "devices and for others; ps:0 ran nothing"
    )


@exercise("1.2", "Model parallelism", allowed=("dtfkit.recipes.tf1.dense",))
def model_parallel(place_layers: Callable, *, hidden: bool = False) -> CheckResult:
    """Train one step of ``place_layers(tf, images, devices, units)`` from a client: layer ``i`` (``units[i]``
    units) must keep its variables and its matmuls on ``devices[i]``, for the text's case and others.

    Example::

        check.ch01.model_parallel(place_layers)
    """
    problem = ignores(place_layers, ("tf", "images", "devices", "units"), "devices and layer sizes")
    if problem is not None:
        return problem
    cases = LAYER_CASES + (LAYER_HIDDEN + _fresh_layers() if hidden else ())
    with cluster(ps=1, workers=2) as c:
        (runs,) = c.run(_trace_layers, args=(place_layers, cases), on="client", timeout=150).values()
    for (devices, units), traced in zip(cases, runs, strict=True):
        case = f"with devices={list(devices)} and units={list(units)}"
        rows = traced["variables"]
        for i, (device, size) in enumerate(zip(devices, units, strict=True)):
            fan_in = 64 if i == 0 else units[i - 1]
            kernel = [v for v in rows if v["shape"] == [fan_in, size]]
            if not kernel:
                return failed(
                    f"{case}, no {fan_in} x {size} kernel for layer {i + 1}",
                    "layer i has units[i] units and reads the layer before it",
                )
            mine = [v for v in rows if v["shape"] in ([fan_in, size], [size])]
            wrong = [
                f"{v['variable']} on {v['task'] or 'no device'}" for v in mine if v["task"] != task_of(device)
            ]
            if wrong:
                return failed(
                    f"{case}, layer {i + 1}'s variables should be on {task_of(device)}: {', '.join(wrong)}",
                    "build each layer inside the device scope of its device",
                )
        if traced["layer_ops"] is None:
            return failed(f"{case}, a layer's kernel could not be found", "one dense layer per device")
        for i, (device, names) in enumerate(zip(devices, traced["layer_ops"], strict=True)):
            work = [
                r
                for r in traced["ops"]
                if r["op"] in names or any(r["op"].startswith(f"gradients/{n}_grad/") for n in names)
            ]
            elsewhere = sorted({r["task"] for r in work} - {task_of(device)})
            if not work or elsewhere:
                return failed(
                    f"{case}, layer {i + 1}'s matmuls ran on {', '.join(elsewhere) or 'no task'}, "
                    f"not {task_of(device)}",
                    "put each layer's matmul with its variables, not only the variables",
                )
    return passed(
        "each layer trained on its own device, variables and matmuls, for the text's split and for others"
    )
