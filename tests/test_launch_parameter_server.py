"""``dtfkit launch`` on TensorFlow's own parameter-server tutorial shape (issue 40, item 5).

TensorFlow's ``parameter_server_training`` tutorial, "Clusters in the real world": every task reads
``TF_CONFIG``; ps and workers start a ``tf.distribute.Server`` and ``join()``; the chief is the
coordinator (``ParameterServerStrategy`` + ``ClusterCoordinator``). The TFJob that ``dtfkit export``
writes ends with its chief; ``launch`` must end there too, not wait for servers that never return.
"""

from __future__ import annotations

import textwrap

import pytest

import dtfkit

PSS_TUTORIAL = textwrap.dedent(
    """
    import os
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        os.environ["GRPC_FAIL_FAST"] = "use_caller"
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=resolver.task_type,
            task_index=resolver.task_id,
            protocol=resolver.rpc_layer or "grpc",
            start=True,
        )
        server.join()
    else:
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            total = tf.Variable(0.0)

        @tf.function
        def step():
            total.assign_add(1.0)
            return total.read_value()

        for _ in range(STEPS):
            coordinator.schedule(step)
        coordinator.join()
        print(f"coordinator done: {total.numpy():g} steps counted", flush=True)
    """
).replace("STEPS", "12")


@pytest.mark.slow
def test_launch_ends_a_parameter_server_job_when_its_chief_is_done(tmp_path):
    script = tmp_path / "pss_tutorial.py"
    script.write_text(PSS_TUTORIAL)
    lines: list[tuple[str, str]] = []
    result = dtfkit.launch(
        str(script),
        chief=1,
        ps=1,
        workers=2,
        timeout=300,
        echo=lambda task, line: lines.append((task, line)),
    )
    text = "\n".join(f"[{t}] {line}" for t, line in lines)
    assert result.ok and not result.timed_out, result.summary() + "\n" + text
    assert result.exit_codes == {"chief:0": 0, "ps:0": None, "worker:0": None, "worker:1": None}, text
    assert "[chief:0] coordinator done: 12 steps counted" in text, text
    (said,) = [m for m in result.messages if "only join() their servers" in m]
    assert said.startswith("chief:0 exited 0 and worker:0, worker:1 only join() their servers"), said
    # The TF1 advice is for a between-graph worker waiting on its peers, not for these servers.
    assert "device_filters" not in text, text
