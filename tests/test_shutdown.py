"""Prompt, complete shutdown of launched scripts.

The seed's script, hand-launched in async mode, never exits (FACTS.md): the late
non-chief, whose session has no device filter, waits for every task of the cluster,
and the chief has already exited. ``launch`` keeps a finished worker's process (and
the server its script started) until every worker is done, so the late worker
completes and the launcher ends every process. How long each phase takes is
measured in ``benchmarks/`` (``--only seed,shutdown``), not asserted here."""

from __future__ import annotations

import psutil
import pytest
from conftest import REPO, cluster_processes, wait_gone, zygote_pids

import dtfkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

EXAMPLE = REPO / "dtfkit" / "examples" / "distributed_mnist.py"
SEED_BEHAVIOUR = ["--device_filters=False", "--poll_chief_secs=0", "--train_steps=200"]


def test_launch_does_not_hang_on_the_seed_script_in_async_mode(tmp_path):
    lines: list[tuple[str, str]] = []
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = dtfkit.launch(
        str(EXAMPLE),
        ps=2,
        workers=2,
        args=SEED_BEHAVIOUR,
        timeout=300,
        echo=lambda t, line: lines.append((t, line)),
    )
    assert result.ok, result.summary() + "\n" + "\n".join(f"[{t}] {line}" for t, line in lines)
    assert result.exit_codes == {"ps:0": None, "ps:1": None, "worker:0": 0, "worker:1": 0}
    text = "\n".join(f"[{t}] {line}" for t, line in lines)
    # Both workers finished their script (the last line each prints), the later one
    # while the earlier one's process was kept for it.
    assert "[worker:0] worker 0 done" in text and "[worker:1] worker 1 done" in text, text
    cluster_id = result.log_dir.rstrip("/").split("/")[-2]
    assert wait_gone(cluster_processes(cluster_id), 10) == []
    after = [p for p in psutil.Process().children(recursive=True) if p.pid not in before | zygote_pids()]
    assert wait_gone(after, 10) == []
