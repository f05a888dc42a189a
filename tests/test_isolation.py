"""Network isolation: the default cluster lives in its own network namespace, its
servers do not listen on the host and cannot be reached from another namespace,
while a ``network="host"`` cluster can (the control that proves the probe works).

The reachability test builds a second network namespace joined to the host by a
veth pair with private addresses (10.213.0.1/30 host side, 10.213.0.2/30 inside)
and only ever connects to 10.213.0.1. It needs root and ``ip`` (iproute2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from conftest import listening_ports, port_of, share_cluster

import dtfkit
from dtfkit.engine.platform import netns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HOST_SIDE, PEER_SIDE = "10.213.0.1", "10.213.0.2"


def net_namespace_of_this_task():
    return os.readlink("/proc/self/ns/net")


def task_name():
    return dtfkit.this_task().name


def ports_of(cluster) -> set[int]:
    return {port_of(a) for hosts in cluster.cluster_spec.values() for a in hosts}


@pytest.fixture(scope="module")
def host_clusters():
    """Two clusters on the host network, started one after the other by this process."""
    # Each start warns that the servers are exposed (tests/test_hardening.py checks the text).
    with pytest.warns(UserWarning, match="network='host'"):
        first = dtfkit.LocalCluster(workers=1, network="host", progress=False, name=None)
    with share_cluster(first):
        with pytest.warns(UserWarning, match="network='host'"):
            second = dtfkit.LocalCluster(workers=1, network="host", progress=False, name=None)
        with share_cluster(second):
            yield first, second


# ------------------------------------------------------------------- namespaces
def test_default_cluster_runs_in_its_own_network_namespace(cluster):
    if not netns.isolation_available()[0]:
        pytest.skip(f"user namespaces are not available here: {netns.isolation_available()[1]}")
    assert cluster.isolated
    assert "isolated network namespace" in repr(cluster)
    pids = cluster.pids()
    mine = netns.namespace_id()
    anchor = netns.namespace_id(pids["netns"])
    assert anchor != mine
    for name in cluster.tasks:
        assert netns.namespace_id(pids[name]) == anchor, name
    # And as the tasks themselves see it.
    assert set(cluster.run(net_namespace_of_this_task, on="all", timeout=60).values()) == {anchor}


def test_isolated_ports_do_not_listen_on_the_host(cluster, host_clusters):
    if not cluster.isolated:
        pytest.skip("the cluster is not isolated on this machine")
    isolated = ports_of(cluster)
    host = set().union(*(ports_of(c) for c in host_clusters))
    here = listening_ports()
    assert isolated & here == set(), "an isolated cluster's port listens in the host's namespace"
    # Controls: the same reading sees the host clusters' servers, and the isolated
    # servers do listen inside their own namespace.
    assert host <= here
    assert isolated <= listening_ports(f"/proc/{cluster.pids()['netns']}/net")


def test_host_network_clusters_in_one_process_get_disjoint_ports(host_clusters):
    first, second = host_clusters
    assert not first.isolated and not second.isolated
    assert "netns" not in first.pids() and "netns" not in second.pids()
    assert ports_of(first).isdisjoint(ports_of(second))
    assert first.run(task_name, timeout=60) == {"worker:0": "worker:0"}
    assert second.run(task_name, timeout=60) == {"worker:0": "worker:0"}
    assert first.id != second.id


# --------------------------------------------------- reachability from elsewhere
def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture
def veth_namespace():
    """A network namespace joined to this one by a veth pair; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace and a veth pair")
    if shutil.which("ip") is None:
        pytest.skip("needs the 'ip' command (apt-get install -y iproute2)")
    tag = uuid.uuid4().hex[:6]
    ns, host_if, peer_if = f"dtfkit-test-{tag}", f"dtk{tag}h", f"dtk{tag}p"
    made = _ip("netns", "add", ns, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        _ip("link", "set", peer_if, "netns", ns)
        _ip("addr", "add", f"{HOST_SIDE}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{PEER_SIDE}/30", "dev", peer_if)
        _ip("netns", "exec", ns, "ip", "link", "set", peer_if, "up")
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        _ip("link", "del", host_if, check=False)
        _ip("netns", "del", ns, check=False)
        assert ns not in _ip("netns", "list", check=False).stdout


PROBE = """
import json, socket, sys
host, ports = sys.argv[1], json.loads(sys.argv[2])
out = {}
for port in ports:
    try:
        socket.create_connection((host, port), timeout=3).close()
        out[port] = "open"
    except ConnectionRefusedError:
        out[port] = "refused"
    except OSError as exc:
        out[port] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


def _probe_from(ns: str, ports: list[int]) -> dict[int, str]:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", PROBE, HOST_SIDE, json.dumps(ports)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return {int(k): v for k, v in json.loads(out.stdout).items()}


def test_isolated_cluster_cannot_be_reached_from_another_namespace(cluster, host_clusters, veth_namespace):
    if not cluster.isolated:
        pytest.skip("the cluster is not isolated on this machine")
    control = sorted(ports_of(host_clusters[0]))
    isolated = sorted(ports_of(cluster))
    result = _probe_from(veth_namespace, control + isolated)
    # The control: a host-network server is reachable through the veth pair...
    assert {result[p] for p in control} == {"open"}, result
    # ...the isolated cluster's servers are not.
    assert all(result[p] != "open" for p in isolated), result


# ------------------------------------------------- an anchor that makes no namespace
# The tasks are spawned alongside the anchor, which doubles as the isolation probe
# in a process that has not probed yet: when it fails, the tasks are ended and the
# probe decides between an error and the host network, as when it ran first.
FAILING_ANCHOR = [sys.executable, "-c", "print('failed simulated anchor failure'); raise SystemExit(1)"]


@pytest.fixture
def failing_anchor(monkeypatch):
    monkeypatch.setattr(netns, "anchor_command", lambda links=None: FAILING_ANCHOR)
    monkeypatch.setattr(netns, "_KNOWN", None)  # not probed yet in this process (restored after)
    return monkeypatch


def test_without_namespaces_a_failed_anchor_falls_back_to_the_host_network(failing_anchor):
    failing_anchor.setattr(netns, "_probe", lambda: (False, "simulated: no user namespaces"))
    with pytest.warns(UserWarning, match="simulated: no user namespaces"):
        cluster = dtfkit.LocalCluster(workers=1, progress=False, name=None)
    with cluster:
        assert not cluster.isolated
        assert "NOT isolated" in repr(cluster)
        assert "netns" not in cluster.pids()
        assert cluster.run(task_name, timeout=60) == {"worker:0": "worker:0"}
    assert netns.known_isolation() == (False, "simulated: no user namespaces")


def test_without_namespaces_network_isolated_refuses(failing_anchor):
    failing_anchor.setattr(netns, "_probe", lambda: (False, "simulated: no user namespaces"))
    with pytest.raises(dtfkit.ClusterStartError, match="network='isolated' was asked for, but simulated"):
        dtfkit.LocalCluster(workers=1, network="isolated", progress=False, name=None)


def test_an_anchor_failing_where_namespaces_work_is_an_error(failing_anchor):
    failing_anchor.setattr(netns, "_probe", lambda: (True, ""))
    with pytest.raises(
        dtfkit.ClusterStartError, match="could not be created: failed simulated anchor failure"
    ):
        dtfkit.LocalCluster(workers=1, progress=False, name=None)
