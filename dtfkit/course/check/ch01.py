"""Checks for chapter 1 (ClusterSpec basics: where each op runs)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.course.task_side.ch01 import (
    _trace_builds,
    _trace_layers,
)
from dtfkit.i18n import N_, _
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


def _placed(variable: dict) -> str:
    return _("{variable} on {task}").format(
        variable=variable["variable"], task=variable["task"] or _("no device")
    )


@exercise("1.1", "Variables on a worker", reads=("tf", "variables_on", "compute_on"), varies=N_("devices"))
def variables_on_worker(build: Callable, *, hidden: bool = False) -> CheckResult:
    """Run ``build(tf, variables_on, compute_on)`` (returns ``z``) from a separate client on a 1 ps +
    2 workers cluster, for the text's devices and for others (``hidden``: more of them).

    Example::

        check.ch01.variables_on_worker(build)
    """
    cases = BUILD_CASES + (BUILD_HIDDEN if hidden else ())
    with cluster(ps=1, workers=2) as c:
        (runs,) = c.run(_trace_builds, args=(build, cases), on="client", timeout=120).values()
    for (variables_on, compute_on), traced in zip(cases, runs, strict=True):
        want_vars, want_z = task_of(variables_on), task_of(compute_on)
        case = _("with variables_on={variables_on!r} and compute_on={compute_on!r}").format(
            variables_on=variables_on, compute_on=compute_on
        )
        value = np.asarray(traced["value"])
        if value.shape != (2, 2) or not np.allclose(value, 7.0):
            return failed(
                _("{case}, z came out as {value_tolist}, not [[7, 7], [7, 7]]").format(
                    case=case, value_tolist=value.tolist()
                ),
                _("z = x + y with x all 3s and y all 4s"),
            )
        wrong = [_placed(v) for v in traced["variables"] if v["task"] != want_vars]
        if not traced["variables"] or wrong:
            return failed(
                _("{case}, the variables are not all on {want_vars}: {wrong_variables}").format(
                    case=case,
                    want_vars=want_vars,
                    wrong_variables=_(", ").join(wrong) or _("no variable created"),
                ),
                _("a variable lives on the device scope it is created in"),
            )
        ran = placement.by_task(traced["ops"])
        if ran.get("ps:0"):
            return failed(
                _("{case}, ps:0 still ran {sorted_ran_ps_0}").format(
                    case=case, sorted_ran_ps_0=sorted(ran["ps:0"])
                ),
                _("nothing should be placed on /job:ps"),
            )
        z_task = next((r["task"] for r in traced["ops"] if r["op"] == traced["z_op"]), None)
        if z_task != want_z:
            return failed(
                _("{case}, z was computed on {z_task}, not {want_z}").format(
                    case=case, z_task=z_task, want_z=want_z
                ),
                _("an op runs on the device scope it is created in, whatever its inputs"),
            )
    return passed(
        _(
            "x and y lived where variables_on said and z was computed where compute_on said, for the text's devices and for others; ps:0 ran nothing"
        )
    )


@exercise(
    "1.2",
    "Model parallelism",
    allowed=("dtfkit.recipes.tf1.dense",),
    reads=("tf", "images", "devices", "units"),
    varies=N_("devices and layer sizes"),
)
def model_parallel(place_layers: Callable, *, hidden: bool = False) -> CheckResult:
    """Train one step of ``place_layers(tf, images, devices, units)`` from a client: layer ``i`` (``units[i]``
    units) must keep its variables and its matmuls on ``devices[i]``, for the text's case and others.

    Example::

        check.ch01.model_parallel(place_layers)
    """
    cases = LAYER_CASES + (LAYER_HIDDEN + _fresh_layers() if hidden else ())
    with cluster(ps=1, workers=2) as c:
        (runs,) = c.run(_trace_layers, args=(place_layers, cases), on="client", timeout=150).values()
    for (devices, units), traced in zip(cases, runs, strict=True):
        case = _("with devices={list_devices} and units={list_units}").format(
            list_devices=list(devices), list_units=list(units)
        )
        rows = traced["variables"]
        for i, (device, size) in enumerate(zip(devices, units, strict=True)):
            fan_in = 64 if i == 0 else units[i - 1]
            kernel = [v for v in rows if v["shape"] == [fan_in, size]]
            if not kernel:
                return failed(
                    _("{case}, no {fan_in} x {size} kernel for layer {i_1}").format(
                        case=case, fan_in=fan_in, size=size, i_1=i + 1
                    ),
                    _("layer i has units[i] units and reads the layer before it"),
                )
            mine = [v for v in rows if v["shape"] in ([fan_in, size], [size])]
            wrong = [_placed(v) for v in mine if v["task"] != task_of(device)]
            if wrong:
                return failed(
                    _("{case}, layer {i_1}'s variables should be on {task_of_device}: {join_wrong}").format(
                        case=case, i_1=i + 1, task_of_device=task_of(device), join_wrong=_(", ").join(wrong)
                    ),
                    _("build each layer inside the device scope of its device"),
                )
        if traced["layer_ops"] is None:
            return failed(
                _("{case}, a layer's kernel could not be found").format(case=case),
                _("one dense layer per device"),
            )
        for i, (device, names) in enumerate(zip(devices, traced["layer_ops"], strict=True)):
            work = [
                r
                for r in traced["ops"]
                if r["op"] in names or any(r["op"].startswith(f"gradients/{n}_grad/") for n in names)
            ]
            elsewhere = sorted({r["task"] for r in work} - {task_of(device)})
            if not work or elsewhere:
                return failed(
                    _("{case}, layer {i_1}'s matmuls ran on {elsewhere}, not {task_of_device}").format(
                        case=case,
                        i_1=i + 1,
                        elsewhere=_(", ").join(elsewhere) or _("no task"),
                        task_of_device=task_of(device),
                    ),
                    _("put each layer's matmul with its variables, not only the variables"),
                )
    return passed(
        _("each layer trained on its own device, variables and matmuls, for the text's split and for others")
    )
