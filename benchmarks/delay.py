"""Emulated link delay (``LocalCluster(link="100mbit", delay=d)``, issue 23): S bytes between two
tasks against the model.

For each delay d (no relay at all, 0, 10 ms, 50 ms) one cluster of 1 ps + 1 worker at rate
r = 100 mbit/s, and for each size S:

- **TCP stream**: the worker sends S bytes to a relay (``dtfkit.engine.task.relay``, the one
  every task's server sits behind) that the ps task starts in its own namespace in front of
  a plain socket; time from the sender's first byte to the receiver's last
  (``time.monotonic`` is one clock for every process of the machine). Model: ``d + S/r``.
- **TF read**: the worker reads an S-byte variable that lives on ps (TF1 graph, its own
  session on the worker's server; the graph is registered and the connection warmed up
  first). A read is a request to ps and its answer, so the model is ``2d + S/r``.

The ratio is measured/model; "within 10%" is ``|ratio - 1| <= 0.1``. Small transfers are
dominated by what the model leaves out, so the table also gives a refined model: the token
bucket lets its burst (10 ms of traffic, 125 kB at 100 mbit/s) through at once, and counts
whole Ethernet frames (1514 bytes on the wire for 1448 bytes of TCP payload), so
``d + max(0, S - burst) * 1514/1448 / r``. What neither model has is TensorFlow's own
per-step cost (a millisecond or more on a busy machine) and the relay's (about a
millisecond per round trip: compare the rows without a relay).
Run::

    python -m benchmarks.delay --repeat 3            # prints the table
    python -m benchmarks.delay --repeat 3 --append   # and adds it to benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

RATE = "100mbit"
DELAYS = (None, "0ms", "10ms", "50ms")  # None: no delay= at all, no relay (the baseline)
SIZES = (1_000, 100_000, 1_000_000, 4_000_000)  # bytes
STREAM_PORT = 47002  # any port: each task has a network namespace of its own


# ------------------------------------------------------------ in the tasks
def stream_receive(port: int, size: int, delay: float) -> float:
    """In ps: a relay with ``delay`` on ``port`` in front of a plain socket; read ``size`` bytes
    through it. Returns the ``time.monotonic()`` of the last byte."""
    import socket
    import time

    from dtfkit.engine.task import relay

    public = socket.socket()  # bound, not listening: the relay listens once it runs
    public.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    public.bind(("", port))
    server_port, process = relay.start(public, delay, {})
    public.close()
    try:
        with socket.create_server(("127.0.0.1", server_port)) as server:
            server.settimeout(120)
            conn, _ = server.accept()
            with conn:
                got = 0
                while got < size:
                    chunk = conn.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError(f"the stream ended after {got} of {size} bytes")
                    got += len(chunk)
                return time.monotonic()
    finally:
        process.kill()
        process.wait(10)


def stream_send(host: str, port: int, size: int) -> float:
    """In the worker: connect (retrying while the receiver starts) and send ``size`` bytes;
    returns the ``time.monotonic()`` of the first byte."""
    import socket
    import time

    deadline = time.monotonic() + 60
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.monotonic()
        sock.sendall(b"\0" * size)
    return start


def tf_reads(sizes: list[int], times: int) -> dict[int, list[float]]:
    """In the worker: seconds of ``times`` reads of an S-byte variable on ps:0, per S."""
    import time

    import tensorflow as tf

    import dtfkit

    ctx = dtfkit.this_task()
    out: dict[int, list[float]] = {}
    with tf.Graph().as_default():
        totals = {}
        for size in sizes:
            with tf.compat.v1.device("/job:ps/task:0"):
                var = tf.compat.v1.Variable(tf.zeros([size // 4]), name=f"v{size}")
            with tf.compat.v1.device(f"/job:worker/task:{ctx.task_index}"):
                totals[size] = (var, tf.reduce_sum(tf.identity(var)))
        with tf.compat.v1.Session(ctx.target) as sess:
            sess.run([var.initializer for var, _ in totals.values()])
            for _ in range(2):  # register each read's graph; let gRPC's flow-control window grow
                for _, total in totals.values():
                    sess.run(total)
            for size, (_, total) in totals.items():
                out[size] = []
                for _ in range(times):
                    start = time.monotonic()
                    sess.run(total)
                    out[size].append(time.monotonic() - start)
    return out


# ------------------------------------------------------------ measuring
def measure(repeat: int, log) -> list[dict]:
    """One result per (d, kind, S): measured median and model, in seconds."""
    import dtfkit
    from dtfkit.engine.platform import netns

    ok, why = netns.isolation_available()
    if not ok:
        raise SystemExit(f"skipped: {why}")
    rate = netns.parse_rate(RATE)
    results = []
    for delay in DELAYS:
        d = 0.0 if delay is None else netns.parse_delay(delay)
        with dtfkit.LocalCluster(
            ps=1, workers=1, link=RATE, delay=delay, progress=False, name=None, start_timeout=180
        ) as cluster:
            host = cluster.address("ps:0").rpartition(":")[0]
            reads = cluster.run(tf_reads, (list(SIZES), repeat), on="worker:0", timeout=600)["worker:0"]
            for size in SIZES:
                seconds = []
                if delay is not None:  # without delay= there is no relay to send through
                    for _ in range(repeat):
                        got = cluster.submit(stream_receive, (STREAM_PORT, size, d), on="ps:0", timeout=300)
                        start = cluster.run(
                            stream_send, (host, STREAM_PORT, size), on="worker:0", timeout=300
                        )
                        seconds.append(got.result()["ps:0"] - start["worker:0"])
                    results.append(_result(delay, "TCP stream", size, seconds, d + size * 8 / rate, rate))
                results.append(_result(delay, "TF read", size, reads[size], 2 * d + size * 8 / rate, rate))
                now = [r for r in results if r["size"] == size and r["delay"] == results[-1]["delay"]]
                log(f"  {delay or 'no delay='} S={size}: " + ", ".join(_words(r) for r in now))
    return results


# What the token bucket really sends (see the module docstring): its burst passes at once,
# and it counts Ethernet frames, 1514 bytes for 1448 bytes of TCP payload.
FRAME = 1514 / 1448


def refined(model: float, size: int, rate: int) -> float:
    """``model`` (d + S/r or 2d + S/r) with the token bucket's burst and frame overhead."""
    from dtfkit.engine.platform import netns

    burst = netns._tbf_args(rate)["burst"]
    return model - size * 8 / rate + max(0, size - burst) * FRAME * 8 / rate


def _result(delay, kind: str, size: int, seconds: list[float], model: float, rate: int) -> dict:
    from dtfkit.engine.platform import netns

    median = statistics.median(seconds)
    return {
        "delay": delay or "none (no relay)",
        "d": 0.0 if delay is None else netns.parse_delay(delay),
        "kind": kind,
        "size": size,
        "measured": median,
        "range": (min(seconds), max(seconds)),
        "n": len(seconds),
        "model": model,
        "ratio": median / model,
        "refined": refined(model, size, rate),
    }


def _words(r: dict) -> str:
    return f"{r['kind']} {r['measured'] * 1000:.1f} ms (model {r['model'] * 1000:.1f})"


def table(results: list[dict]) -> str:
    out = [
        "| delay d | transfer | S (bytes) | model | measured (median, range) | measured/model | within 10% "
        "| refined model | measured/refined |",
        "|---|---|---:|---|---|---:|---|---:|---:|",
    ]
    for r in results:
        model = ("d + S/r" if r["kind"] == "TCP stream" else "2d + S/r") + f" = {r['model'] * 1000:.1f} ms"
        low, high = r["range"]
        measured = f"{r['measured'] * 1000:.1f} ms (n={r['n']}, {low * 1000:.1f}-{high * 1000:.1f})"
        within = "yes" if abs(r["ratio"] - 1) <= 0.1 else "no"
        out.append(
            f"| {r['delay']} | {r['kind']} | {r['size']:,} | {model} | {measured} | {r['ratio']:.2f} | {within} "
            f"| {r['refined'] * 1000:.1f} ms | {_ratio(r['measured'], r['refined'])} |"
        )
    return "\n".join(out)


def _ratio(measured: float, model: float) -> str:
    return f"{measured / model:.2f}" if model > 0 else "- (model 0: within the burst)"


def summary(results: list[dict]) -> str:
    """How many transfers are within 10% of the model, in all and where S/r >= 10 ms or d > 0."""
    near = [abs(r["ratio"] - 1) <= 0.1 for r in results]
    big = [abs(r["ratio"] - 1) <= 0.1 for r in results if r["size"] >= 1_000_000]
    delayed = [abs(r["ratio"] - 1) <= 0.1 for r in results if r["size"] >= 1_000_000 and r["d"] > 0]
    near_refined = [abs(r["measured"] / r["refined"] - 1) <= 0.1 for r in results if r["refined"] >= 0.005]
    return (
        f"Within 10% of the model: {sum(near)} of {len(near)} transfers; {sum(big)} of {len(big)} with "
        f"S >= 1 MB ({sum(delayed)} of {len(delayed)} of them with a delay). Within 10% of the refined model, "
        f"where it is at least 5 ms: {sum(near_refined)} of {len(near_refined)}."
    )


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import LoadSampler, append_to_results, machine

    parser = argparse.ArgumentParser(prog="python -m benchmarks.delay", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="transfers per size and delay (default 3)")
    parser.add_argument("--append", action="store_true", help="add the table to benchmarks/RESULTS.md")
    ns = parser.parse_args(argv)
    info = machine()
    load = LoadSampler()
    started = time.monotonic()
    results = measure(ns.repeat, lambda text: print(text, flush=True))
    text = table(results) + "\n\n" + summary(results)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    facts = "; ".join(f"{k} {v}" for k, v in info.items() if k != "date")
    header = (
        f"# Link delay against the model (issue 23; `python -m benchmarks.delay --repeat {ns.repeat}`, {when})\n\n"
        f"{facts}; 1-minute load average during the run: {load.stop()}; {time.monotonic() - started:.0f} s. "
        f"Rate r = {RATE} on both tasks' links, 1 ps + 1 worker, one cluster per delay.\n\n"
    )
    print("\n" + header + text)
    if ns.append:
        path = append_to_results(header + text + "\n")
        print(f"\nappended to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
