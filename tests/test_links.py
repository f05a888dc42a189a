"""Emulated network links (``LocalCluster(link=...)``): every task its own network
namespace and 10.77.x.y address, joined through a bridge in the anchor's namespace by a
token-bucket-limited veth pair.

The rate checks time a plain TCP transfer of S bytes between two tasks (over their own
addresses, inside the cluster's namespaces) and assert only a loose lower bound,
``time >= 0.5 * S / rate``: a busy machine can make a transfer slower, never faster, so
the bound holds under load; without the link the same transfer over a veth takes a few
milliseconds."""

from __future__ import annotations

import os

import psutil
import pytest
from conftest import share_cluster, wait_gone

import dtfkit
from dtfkit.cluster_display import start_words
from dtfkit.engine.launchers.links import link_rate, plan_links
from dtfkit.engine.launchers.local import LocalLauncher
from dtfkit.engine.platform import netns
from dtfkit.errors import DtfkitError

PORT = 47001  # any port: each task has a network namespace of its own
RATES = {"ps": "40mbit", "worker": "200mbit"}


def needs_namespaces():
    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"user namespaces are not available here: {why}")


# --------------------------------------------------------------- in the tasks
def receive(port: int, size: int) -> tuple[int, float]:
    """Accept one connection and read ``size`` bytes: (bytes read, seconds from first byte to last)."""
    import socket
    import time

    with socket.create_server(("", port)) as server:
        server.settimeout(60)
        conn, _ = server.accept()
        with conn:
            conn.settimeout(60)
            got, first = 0, None
            while got < size:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                if first is None:
                    first = time.monotonic()
                got += len(chunk)
            return got, time.monotonic() - (first or time.monotonic())


def send(host: str, port: int, size: int) -> bool:
    """Connect to ``host:port`` (retrying while the receiver starts listening) and send ``size`` bytes."""
    import socket
    import time

    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.sendall(b"\0" * size)
    return True


def own_namespace() -> str:
    """This task's network namespace."""
    return os.readlink("/proc/self/ns/net")


def transfer_seconds(cluster, source: str, target: str, size: int) -> float:
    host = cluster.address(target).rpartition(":")[0]
    receiving = cluster.submit(receive, (PORT, size), on=target, timeout=120)
    cluster.run(send, (host, PORT, size), on=source, timeout=120)
    got, seconds = receiving.result()[target]
    assert got == size
    return seconds


def assert_rate_at_most(seconds: float, size: int, rate: str) -> None:
    floor = 0.5 * size * 8 / netns.parse_rate(rate)
    assert seconds >= floor, f"{size} bytes at {rate} took {seconds:.3f} s, under half of {2 * floor:.3f} s"


# ------------------------------------------------------------------ unit tests
@pytest.mark.parametrize("bad", ["100", "fast", "10 mbps", "100mb", "0kbit", "-1mbit", "40gbit", 100, ""])
def test_bad_rate_strings_are_refused_before_anything_starts(bad, no_spawn):
    with pytest.raises(DtfkitError) as info:
        dtfkit.LocalCluster(workers=1, link=bad, progress=False, name=None)
    text = str(info.value)
    assert repr(bad) in text
    assert "kbit, mbit or gbit" in text or "link must be" in text
    with pytest.raises(DtfkitError, match=r"link\['worker'\].*'fast'.*kbit, mbit or gbit"):
        dtfkit.LocalCluster(workers=1, link={"worker": "fast"}, progress=False, name=None)
    assert no_spawn == []


@pytest.mark.parametrize("key", ["workers", "worker:x", "gpu:0", 3])
def test_bad_link_keys_are_refused(key, no_spawn):
    with pytest.raises(DtfkitError, match=f"link key {key!r} names no task"):
        dtfkit.LocalCluster(workers=1, link={key: "10mbit"}, progress=False, name=None)


def test_rates_by_task_then_job_then_default():
    plan = plan_links({"ps": "50mbit", "worker": "200mbit", "worker:1": "10mbit"})
    assert link_rate(plan, "ps:0") == 50_000_000
    assert link_rate(plan, "worker:0") == 200_000_000
    assert link_rate(plan, "worker:1") == 10_000_000
    assert link_rate(plan, "chief:0") is None  # unlisted: no limit
    assert link_rate(plan_links({"default": "1.5gbit", "ps": "1gbit"}), "worker:3") == 1_500_000_000
    assert plan_links("100mbit") == {"default": 100_000_000}
    assert plan_links(None) is None
    assert netns.format_rate(1_500_000) == "1500kbit"


def test_link_is_refused_on_the_host_network(no_spawn):
    with pytest.raises(DtfkitError, match="network='host'"):
        dtfkit.LocalCluster(workers=1, network="host", link="100mbit", progress=False, name=None)
    with pytest.raises(DtfkitError, match="network='host'"):
        LocalLauncher(network="host", link={"worker": "10mbit"})
    assert no_spawn == []


def test_link_is_refused_where_namespaces_are_unavailable(monkeypatch, no_spawn):
    monkeypatch.setattr(netns, "isolation_available", lambda: (False, "user namespaces are off (test)"))
    with pytest.raises(DtfkitError, match=r"link= needs network namespaces.*user namespaces are off"):
        dtfkit.LocalCluster(workers=1, link="100mbit", progress=False, name=None)
    assert no_spawn == []


@pytest.mark.slow
def test_a_cluster_with_links_is_forked_too():
    """Each task enters a namespace of its own right after its fork, while it has one thread."""
    needs_namespaces()
    with dtfkit.LocalCluster(workers=2, link="100mbit", progress=False, name=None) as cluster:
        note = start_words(cluster._rt.tasks.describe_launcher().start)
        assert cluster.start_note == note
        names = cluster.run(lambda: os.readlink("/proc/self/ns/net"))
    assert note.startswith("forked 2 of 2 task process(es) from the task zygote"), note
    assert len(set(names.values())) == 2, names  # a namespace each


def test_addresses_are_distinct_and_kept_per_task():
    addresses = [netns.link_address(n) for n in range(600)]
    assert len(set(addresses)) == 600
    assert all(not a.endswith((".0", ".255")) and a.startswith("10.77.") for a in addresses)
    launcher = LocalLauncher.__new__(LocalLauncher)  # no namespace probe needed for host()
    launcher.links, launcher._addresses = {"default": 10**8}, {}
    first = launcher.host_of("worker:0")
    assert launcher.host_of("ps:0") != first and launcher.host_of("worker:0") == first


# ------------------------------------------------------------------ slow tests
@pytest.fixture(scope="module")
def linked():
    """1 ps at 40 mbit/s + 2 workers at 200 mbit/s, each task its own namespace."""
    needs_namespaces()
    cluster = dtfkit.LocalCluster(ps=1, workers=2, link=RATES, progress=False, start_timeout=120, name=None)
    with share_cluster(cluster):
        yield cluster


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_task_has_its_own_namespace_address_and_link(linked):
    pids = linked.pids()
    spec = linked.cluster_spec
    hosts = {name: linked.address(name).rpartition(":")[0] for name in linked.tasks}
    assert all(h.startswith("10.77.") for h in hosts.values()), spec
    assert len(set(hosts.values())) == len(hosts)
    seen = linked.run(own_namespace, on="all", timeout=60)
    namespaces = dict(seen)
    assert len(set(namespaces.values()) | {netns.namespace_id(pids["netns"])}) == len(hosts) + 1
    assert netns.namespace_id() not in namespaces.values()
    text = repr(linked)
    assert "emulated links" in text
    assert "link 40mbit" in text and "link 200mbit" in text
    html = linked._repr_html_()
    assert ">link<" in html and ">40mbit<" in html


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_transfer_takes_at_least_size_over_rate(linked):
    size = 4 * 1024 * 1024  # 4 MiB: 0.84 s at 40 mbit/s, 0.17 s at 200 mbit/s
    # ps (40 mbit/s) sends to a worker, a worker receives from ps: the slower end rules.
    assert_rate_at_most(transfer_seconds(linked, "ps:0", "worker:0", size), size, RATES["ps"])
    assert_rate_at_most(transfer_seconds(linked, "worker:0", "ps:0", size), size, RATES["ps"])
    # Between two workers: 200 mbit/s.
    big = 3 * size
    assert_rate_at_most(transfer_seconds(linked, "worker:1", "worker:0", big), big, RATES["worker"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restarted_task_keeps_its_address_and_link(linked):
    before = linked.address("ps:0")
    old_pid = linked.pids()["ps:0"]
    linked.kill("ps:0")
    linked.restart("ps:0")
    assert linked.status()["ps:0"] == "running"
    assert linked.address("ps:0") == before
    assert linked.pids()["ps:0"] != old_pid
    # A namespace of its own again: not the hub's, not another task's. (Not "not the old one":
    # the kernel may give the new namespace the inode number the old, freed one had.)
    others = {netns.namespace_id(pid) for name, pid in linked.pids().items() if name != "ps:0"}
    assert linked.run(own_namespace, on="ps:0", timeout=60)["ps:0"] not in others
    size = 4 * 1024 * 1024
    assert_rate_at_most(transfer_seconds(linked, "ps:0", "worker:1", size), size, RATES["ps"])
    assert_rate_at_most(transfer_seconds(linked, "worker:1", "ps:0", size), size, RATES["ps"])


def namespaces_in_use(marked: str) -> set[str]:
    """The network namespaces of the processes whose environment names cluster ``marked``."""
    out = set()
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DTFKIT_CLUSTER") == marked:
                out.add(os.readlink(f"/proc/{proc.pid}/ns/net"))
        except (OSError, psutil.Error):
            pass
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_close_leaves_no_process_and_no_namespace():
    needs_namespaces()
    cluster = dtfkit.LocalCluster(workers=1, link="100mbit", progress=False, name=None)
    pids = cluster.pids()
    assert set(pids) == {"worker:0", "netns"}
    namespaces = {netns.namespace_id(pid) for pid in pids.values()}
    procs = [psutil.Process(pid) for pid in pids.values()]
    cluster.close()
    assert wait_gone(procs, 10) == []
    # The interfaces live in those namespaces, which end with their last process. (Only
    # processes marked with this cluster's id count: a namespace made elsewhere meanwhile
    # may get the inode number of a freed one.)
    assert namespaces & namespaces_in_use(marked=cluster.id) == set()
