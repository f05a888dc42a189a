"""Cluster start-up, measured side by side: hand-launched servers vs dtfkit (cold).

    python benchmarks/startup.py [--repeat 3]

(a) hand: 1 ps + 2 workers started as plain ``python -c`` processes, as in seed 000,
    each on a port picked beforehand, waiting until every port accepts connections.
(c) dtfkit cold: ``LocalCluster(ps=1, workers=2)`` until it returns.
Also: ``import dtfkit`` time in a fresh interpreter and whether it imported TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SERVER = (
    "import sys, tensorflow as tf; spec = tf.train.ClusterSpec({{'ps': {ps}, 'worker': {workers}}}); "
    "tf.distribute.Server(spec, job_name=sys.argv[1], task_index=int(sys.argv[2])).join()"
)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def hand_launched() -> float:
    ports = free_ports(3)
    ps, workers = [f"localhost:{ports[0]}"], [f"localhost:{p}" for p in ports[1:]]
    code = SERVER.format(ps=ps, workers=workers)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", code, job, str(i)], env=env, stderr=subprocess.DEVNULL)
        for job, i in (("ps", 0), ("worker", 0), ("worker", 1))
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(port_open(p) for p in ports):  # the hand-launched way: poll the ports
            if time.monotonic() > deadline:
                raise TimeoutError("hand-launched servers did not open their ports in 120 s")
            time.sleep(0.05)
        return time.perf_counter() - start
    finally:
        for p in procs:
            p.kill()
            p.wait()


def dtfkit_cold() -> float:
    import dtfkit

    start = time.perf_counter()
    cluster = dtfkit.LocalCluster(ps=1, workers=2, progress=False)
    elapsed = time.perf_counter() - start
    cluster.close()
    return elapsed


def import_time() -> tuple[float, bool]:
    code = "import time, sys; t = time.perf_counter(); import dtfkit; print(time.perf_counter() - t, 'tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    seconds, tf = out.stdout.split()
    return float(seconds), tf == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    hand, cold = [], []
    for _ in range(ns.repeat):  # interleaved so both see the same machine load
        hand.append(hand_launched())
        cold.append(dtfkit_cold())
    imports = [import_time() for _ in range(ns.repeat)]
    base = statistics.median(hand)
    print(f"\n{'cluster ready, 1 ps + 2 workers':<36}{'median s':>10}{'min s':>8}{'ratio':>8}")
    for label, xs in (("(a) hand-launched, wait for ports", hand), ("(c) dtfkit cold", cold)):
        print(f"{label:<36}{statistics.median(xs):>10.2f}{min(xs):>8.2f}{statistics.median(xs) / base:>8.2f}")
    seconds = statistics.median(s for s, _ in imports)
    print(
        f"\nimport dtfkit: {seconds * 1000:.0f} ms (median of {ns.repeat}); imported TensorFlow: {any(t for _, t in imports)}"
    )


if __name__ == "__main__":
    main()
