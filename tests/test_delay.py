"""Emulated link delay (``LocalCluster(delay=...)``): a relay in front of every task's
server holds each byte for the link's one-way delay (``dtfkit.engine.task.relay``).

What is asserted is the invariant a delay guarantees, a lower bound: nothing arrives
before it was sent plus the delay, however busy the machine. How close to the delay a
transfer comes is a timing outcome, measured in ``benchmarks/`` (``--only delay``)."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest
from conftest import share_cluster, wait_gone

import dtfkit
from dtfkit.cluster_display import link_words as _link_words
from dtfkit.engine.launchers.contract import LauncherDescription
from dtfkit.engine.launchers.links import link_delay, plan_delays
from dtfkit.engine.launchers.local import LocalLauncher
from dtfkit.engine.platform import netns
from dtfkit.engine.task import relay
from dtfkit.engine.wire.protocol import TaskConfig
from dtfkit.errors import DtfkitError

DELAY = "100ms"
SECONDS = 0.1
# asyncio may wake a timer up to its clock resolution early, and a float sum rounds:
# a microsecond below the delay still proves that the relay held the bytes.
EARLY = 1e-6


def needs_namespaces():
    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"user namespaces are not available here: {why}")


# ------------------------------------------------------------------ parsing
def test_delays_parse_as_tc_writes_them():
    assert netns.parse_delay("20ms") == 0.02
    assert netns.parse_delay("0ms") == 0.0
    assert netns.parse_delay("500us") == 0.0005
    assert netns.parse_delay("1.5s") == 1.5
    assert netns.parse_delay("10s") == 10.0
    assert [netns.format_delay(s) for s in (0.02, 0.0, 0.0005, 1.5)] == ["20ms", "0ms", "500us", "1.5s"]


@pytest.mark.parametrize("bad", ["20 ms", "-5ms", "10.5s", "11s", "20", "fast", "1e3ms", "", 20, 0.02, None])
def test_bad_delays_are_value_errors_naming_the_value(bad):
    with pytest.raises(ValueError) as info:
        netns.parse_delay(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", ["20 ms", "-5ms", "11s", 20, ""])
def test_bad_delays_are_refused_before_anything_starts(bad, no_spawn):
    with pytest.raises(DtfkitError) as info:
        dtfkit.LocalCluster(workers=1, link="100mbit", delay=bad, progress=False, name=None)
    text = str(info.value)
    assert repr(bad) in text
    assert "us, ms or s" in text or "0ms to 10s" in text or "delay must be" in text
    with pytest.raises(DtfkitError, match=r"delay\['ps'\].*'-1ms'.*us, ms or s"):
        dtfkit.LocalCluster(workers=1, delay={"ps": "-1ms"}, progress=False, name=None)
    with pytest.raises(DtfkitError, match="delay key 'workers' names no task"):
        dtfkit.LocalCluster(workers=1, delay={"workers": "5ms"}, progress=False, name=None)
    assert no_spawn == []


def test_delays_by_task_then_job_then_default():
    plan = plan_delays({"ps": "50ms", "worker:1": "5ms", "default": "1ms"})
    assert link_delay(plan, "ps:0") == 0.05
    assert link_delay(plan, "worker:1") == 0.005
    assert link_delay(plan, "worker:0") == 0.001
    assert link_delay(plan_delays({"ps": "50ms"}), "worker:0") == 0.0  # unlisted: none
    assert link_delay(None, "worker:0") == 0.0
    assert plan_delays("20ms") == {"default": 0.02}
    assert plan_delays(plan) is plan


def test_a_connection_has_the_larger_delay_of_its_two_tasks():
    cluster = {"ps": ["10.77.0.2:1"], "worker": ["10.77.0.3:2", "10.77.0.4:3"]}
    plan = plan_delays({"ps": "50ms", "worker:1": "5ms"})
    own, peers = relay.peer_delays(cluster, "worker:1", plan)
    assert own == 0.005
    assert peers == {"10.77.0.2": 0.05, "10.77.0.3": 0.005, "10.77.0.4": 0.005}
    own, peers = relay.peer_delays(cluster, "ps:0", plan)
    assert own == 0.05 and set(peers.values()) == {0.05}


def test_the_cluster_table_shows_rate_and_delay():
    described = LauncherDescription(
        network="links", links={"ps": 50_000_000}, delays=plan_delays({"default": "20ms", "ps": "1.5s"})
    )
    assert _link_words(described, "ps:0") == "50mbit, delay 1.5s"
    assert _link_words(described, "worker:0") == "no limit, delay 20ms"
    assert _link_words(LauncherDescription(network="links", links={}), "worker:0") == "no limit"


# ------------------------------------------------------------------ refusals
def test_delay_is_refused_where_it_cannot_work(monkeypatch, no_spawn):
    with pytest.raises(DtfkitError, match="delay= needs each task in a network namespace.*network='host'"):
        dtfkit.LocalCluster(workers=1, network="host", delay="20ms", progress=False, name=None)
    with pytest.raises(
        DtfkitError, match=r"delay= is an option of the local launcher.*LocalLauncher\(delay="
    ):
        dtfkit.LocalCluster(workers=1, delay="20ms", launcher=LocalLauncher(network="host"), progress=False)
    with pytest.raises(DtfkitError, match="start_servers=False.*leave delay out"):
        dtfkit.LocalCluster(workers=1, delay="20ms", start_servers=False, progress=False, name=None)
    monkeypatch.setattr(netns, "isolation_available", lambda: (False, "user namespaces are off (test)"))
    with pytest.raises(
        DtfkitError, match=r"delay= needs network namespaces.*user namespaces are off.*leave delay"
    ):
        dtfkit.LocalCluster(workers=1, delay="20ms", progress=False, name=None)
    assert no_spawn == []


def test_tasks_whose_server_dtfkit_does_not_start_get_no_delay(monkeypatch, no_spawn):
    monkeypatch.setattr(netns, "isolation_available", lambda: (True, ""))
    launcher = LocalLauncher(delay="20ms")
    assert launcher.links == {}  # delay alone: links of their own, no rate limit
    for mode, words in (("noserve", "start_servers=False"), ("script", "scripts")):
        with pytest.raises(DtfkitError, match=f"worker:0: delay= .*{words}"):
            launcher.start(TaskConfig(task="worker:0", gen=1, mode=mode))
    assert no_spawn == []


# ------------------------------------------------------------ the relay itself
def _echo_once(server: socket.socket, got: list) -> None:
    """Accept one connection; send back everything it sends, until it ends."""
    conn, _ = server.accept()
    with conn:
        while data := conn.recv(1 << 16):
            got.append(data)
            conn.sendall(data)


def test_the_relay_holds_each_way_for_the_delay_and_keeps_bytes_and_order():
    """A real relay process on loopback (no TensorFlow): an echo behind it answers no
    sooner than twice the delay, with the same bytes in the same order, and an end of
    stream passes through."""
    public = socket.socket()
    public.bind(("127.0.0.1", 0))
    server_port, process = relay.start(public, SECONDS, {})
    address = public.getsockname()
    public.close()  # the relay has its own copy
    got: list[bytes] = []
    try:
        with socket.create_server(("127.0.0.1", server_port)) as server:
            server.settimeout(30)
            echo = threading.Thread(target=_echo_once, args=(server, got), daemon=True)
            echo.start()
            message = bytes(range(256)) * 4096  # 1 MiB, every byte value, in order
            with socket.create_connection(address, timeout=30) as conn:
                sent = time.monotonic()
                conn.sendall(message[:1])
                first = conn.recv(1)
                round_trip = time.monotonic() - sent
                conn.sendall(message[1:])
                conn.shutdown(socket.SHUT_WR)
                back = first + b"".join(iter(lambda: conn.recv(1 << 16), b""))
            echo.join(30)
        assert round_trip >= 2 * SECONDS - EARLY, f"a round trip took {round_trip:.4f} s"
        assert back == message
        assert b"".join(got) == message
        assert not echo.is_alive()  # the end of stream reached the server behind the relay
    finally:
        process.kill()
        process.wait(10)


def test_a_relay_that_cannot_start_is_an_error_not_a_silent_hang():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as not_a_stream:  # cannot listen()
        not_a_stream.bind(("127.0.0.1", 0))
        with pytest.raises(OSError, match=r"the delay relay .* ended with exit code 1; its output is in"):
            relay.start(not_a_stream, SECONDS, {})


# ------------------------------------------------------------------ slow tests
def fetch_seconds(floats: int, times: int = 3) -> list[float]:
    """In a worker: seconds of each of ``times`` reads of a ``floats``-element variable on ps:0
    (TF1 graph; the first read, which registers the graph, is not timed)."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    out = []
    with tf.Graph().as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            var = tf.compat.v1.Variable(tf.ones([floats]), name=f"v{floats}")
        with tf.compat.v1.device(f"/job:worker/task:{ctx.task_index}"):
            total = tf.reduce_sum(tf.identity(var))
        with tf.compat.v1.Session(ctx.target) as sess:
            sess.run(var.initializer)
            assert sess.run(total) == floats
            for _ in range(times):
                start = time.monotonic()
                sess.run(total)
                out.append(time.monotonic() - start)
    return out


def relays_of(cluster) -> list[psutil.Process]:
    """The relay processes of ``cluster``'s tasks."""
    out = []
    for name, pid in cluster.pids().items():
        if name == "netns":
            continue
        for child in psutil.Process(pid).children(recursive=True):
            if "dtfkit.engine.task.relay" in " ".join(child.cmdline()):
                out.append(child)
    return out


@pytest.fixture(scope="module")
def delayed():
    """1 ps + 1 worker at 100 mbit/s, 100 ms each way."""
    needs_namespaces()
    cluster = dtfkit.LocalCluster(
        ps=1, workers=1, link="100mbit", delay=DELAY, progress=False, start_timeout=120, name=None
    )
    with share_cluster(cluster):
        yield cluster


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_read_across_a_delayed_link_takes_at_least_the_delay_both_ways(delayed):
    assert len(relays_of(delayed)) == 2  # one in front of each server
    text = repr(delayed)
    assert "link 100mbit, delay 100ms" in text
    # A request to ps and its answer each wait 100 ms: no read can take less than 200 ms.
    for seconds in delayed.run(fetch_seconds, (1000,), on="worker:0", timeout=120)["worker:0"]:
        assert seconds >= 2 * SECONDS - EARLY, seconds
    # The rate limit stays (the relay is behind the token buckets): 4 MB pays the delay and
    # at least half its time at 100 mbit/s (the loose bound of test_links.py).
    size = 4_000_000
    floor = 2 * SECONDS + 0.5 * size * 8 / netns.parse_rate("100mbit")
    for seconds in delayed.run(fetch_seconds, (size // 4, 2), on="worker:0", timeout=120)["worker:0"]:
        assert seconds >= floor, f"{size} bytes took {seconds:.3f} s, under {floor:.3f} s"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restarted_task_keeps_its_delay(delayed):
    old = {p.pid for p in relays_of(delayed)}
    before = delayed.address("ps:0")
    delayed.kill("ps:0")
    delayed.restart("ps:0")
    assert delayed.address("ps:0") == before
    assert len(relays_of(delayed)) == 2 and {p.pid for p in relays_of(delayed)} != old
    for seconds in delayed.run(fetch_seconds, (1000,), on="worker:0", timeout=120)["worker:0"]:
        assert seconds >= 2 * SECONDS - EARLY, seconds


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_evaluator_which_runs_no_server_starts_beside_delayed_servers():
    """An evaluator's mode is noserve by its role: with delay= it starts without a relay (it was refused,
    naming start_servers=False, which nobody had set), and the servers keep theirs."""
    needs_namespaces()
    with dtfkit.LocalCluster(workers=1, evaluator=1, delay="1ms", progress=False, name=None) as cluster:
        assert cluster.status() == {"worker:0": "running", "evaluator:0": "running"}
        assert len(relays_of(cluster)) == 1  # the worker's server's relay; the evaluator has none


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_close_ends_the_relays():
    needs_namespaces()
    cluster = dtfkit.LocalCluster(workers=2, delay="1ms", progress=False, name=None)
    relays = relays_of(cluster)
    assert len(relays) == 2
    assert "no limit, delay 1ms" in repr(cluster)
    cluster.close()
    assert wait_gone(relays, 10) == []
