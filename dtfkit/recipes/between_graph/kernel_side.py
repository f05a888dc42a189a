"""Runs in the notebook kernel: bytes per ps under round-robin and greedy placement, the layers' variables,
and the stack excerpts chapter 2 prints.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

from collections.abc import Sequence

from dtfkit.recipes.analysis import interleavings, overlap_seconds  # noqa: F401 - chapter 2 calls bg.interleavings
from dtfkit.recipes.between_graph.task_side import (
    GreedyByBytes,
    StandInVariable,
)


def round_robin_bytes(sizes: Sequence[int], num_ps: int) -> list[int]:
    """Bytes per ps when variables of ``sizes`` bytes are dealt out in order (no TensorFlow)."""
    loads = [0] * num_ps
    for i, size in enumerate(sizes):
        loads[i % num_ps] += size
    return loads


def greedy_bytes(sizes: Sequence[int], num_ps: int) -> list[int]:
    """Bytes per ps when each variable goes to the least-loaded ps (no TensorFlow)."""
    strategy = GreedyByBytes(num_ps, load_fn=lambda size: size)
    for size in sizes:
        strategy(size)
    return strategy.loads


def layer_variables(layers: Sequence[int]) -> list[StandInVariable]:
    """The variables ``uneven_mlp(tf, x, layers)`` creates, in order, as stand-ins (float32; no TensorFlow).

    >>> [v.nbytes for v in layer_variables((4, 3, 2))]
    [48, 12, 24, 8]
    """
    out = []
    for i, (fan_in, units) in enumerate(zip(layers[:-1], layers[1:], strict=True), start=1):
        out.append(StandInVariable(f"dense_{i}/kernel", "VarHandleOp", fan_in * units * 4))
        out.append(StandInVariable(f"dense_{i}/bias", "VarHandleOp", units * 4))
    return out


# -------------------------------------------------------------- plain helpers
def _short_file(path: str) -> str:
    """A frame's file name; a recipe's side keeps its recipe's folder (``between_graph/task_side.py``).

    >>> _short_file("/x/dtfkit/recipes/between_graph/task_side.py"), _short_file("/tf/session.py")
    ('between_graph/task_side.py', 'session.py')
    """
    folder, _, name = path.rpartition("/")
    return f"{folder.rpartition('/')[2]}/{name}" if name in ("task_side.py", "kernel_side.py") else name


def stack_excerpt(
    stacks: str,
    keep: Sequence[str] = (
        "in tutorial_worker",
        "in MonitoredTrainingSession",
        "in wait_for_session",
        "in _ready",
        "in _extend_graph",
    ),
) -> str:
    """The frames of one task's stacks (``TaskTimeout.stacks[task]``) whose ``in <function>``
    part is in ``keep``, each with its source line, skipped frames shown as ``...``: the
    path the stuck task took.

    Example::

        except dtfkit.TaskTimeout as exc:
            print(bg.stack_excerpt(exc.stacks["worker:1"]))
    """
    lines = stacks.splitlines()
    out: list[str] = []
    skipped = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("File "):
            continue
        if not any(stripped.endswith(k) for k in keep):
            skipped = bool(out)
            continue
        if skipped:
            out.append("  ...")
            skipped = False
        path, _, rest = stripped.partition(", line ")
        out.append(f'  File "{_short_file(path.rstrip(chr(34)))}", line {rest}')
        if i + 1 < len(lines) and not lines[i + 1].strip().startswith(("File ", "---", "Thread ")):
            out.append("    " + lines[i + 1].strip())
    return "\n".join(out)
