"""Tasks on a Ray cluster: ``RayLauncher``, one ``TaskActor`` per task start, pinned to a node.

The runtime (``dtfkit.engine.owner.runtime``) is the same as for local processes: it only
sees ``TaskHandle`` s. A ``RayTaskHandle``'s ``connection`` is a relay that speaks to
the task through its actor (the notebook never accepts a connection from a node),
and its output lines come through the actor too. Where each task runs is decided
here, before any actor starts (``plan_placement``).

Example::

    >>> launcher = RayLauncher(address=None, nodes=2)                  # doctest: +SKIP
    >>> ClusterRuntime(layout, launcher=launcher).start()               # doctest: +SKIP
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import pickle
import sys
import threading
import time
import types
from multiprocessing.reduction import ForkingPickler
from typing import Any

from dtfkit.engine.launchers.contract import Launcher, LauncherDescription, ReportedExit, TaskHandle
from dtfkit.engine.platform import state
from dtfkit.engine.platform.taskenv import PACKAGE_ROOT
from dtfkit.engine.wire.protocol import TaskConfig
from dtfkit.errors import ClusterStartError, DtfkitError
from dtfkit.i18n import N_, _
from dtfkit.ray.simulated import SimulatedRayCluster, connect, is_loopback, require_ray

PLACEMENTS = ("spread", "pack")
POLL_SECONDS = 2.0  # long-poll length of recv/read_lines (each returns as soon as there is something)
RPC_SLACK = 30.0  # how much longer than its poll a call may take on a busy cluster before we ask again
START_REPLY_SECONDS = 120.0
KILL_SECONDS = 15.0
CLOSE_SECONDS = 20.0
# Variables that describe the driver's machine, not the task's: never sent to a node.
# (The driver's GPU plan does not apply on a node: Ray sets CUDA_VISIBLE_DEVICES for an actor given GPUs.)
_LOCAL_ONLY_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH", "PWD", "OLDPWD", "_"})
RESOURCE_KEYS_FORM = N_("a job ('ps', 'worker', 'chief', 'evaluator') or a task ('worker:1')")

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RayStart:
    """How a Ray cluster's tasks started (``RayLauncher.describe().start``): on the
    Ray cluster at ``address`` of ``nodes`` alive nodes, placed by ``placement``."""

    address: str
    nodes: int
    placement: str


def check_resources(resources: dict | None) -> dict[str, dict[str, float]]:
    """Check ``resources=`` (``{"worker": {"GPU": 1}, "ps:0": {"CPU": 2}}``); a clear error if malformed."""
    if resources is None:
        return ResourcePlan()
    if isinstance(resources, ResourcePlan):
        return resources
    if not isinstance(resources, dict):
        raise DtfkitError(
            _("resources must be a dict such as {{'worker': {{'GPU': 1}}}}, not {resources!r}").format(
                resources=resources
            )
        )
    out = {}
    for key, wanted in resources.items():
        job, colon, index = key.partition(":") if isinstance(key, str) else ("", "", "")
        if job not in ("ps", "worker", "chief", "evaluator") or (colon and not index.isdigit()):
            raise DtfkitError(
                _("resources key {key!r} names no task: use {form}").format(
                    key=key, form=_(RESOURCE_KEYS_FORM)
                )
            )
        if not isinstance(wanted, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for k, v in wanted.items()
        ):
            raise DtfkitError(
                _(
                    "resources[{key!r}] must map Ray resource names to amounts, such as {{'GPU': 1}}, not {wanted!r}"
                ).format(key=key, wanted=wanted)
            )
        out[key] = {k: float(v) for k, v in wanted.items()}
    return ResourcePlan(out)


class ResourcePlan(dict):
    """A checked ``resources=`` (``check_resources``); checking it again returns it."""


def resources_of(resources: dict[str, dict[str, float]], task: str) -> dict[str, float]:
    """What ``task`` ("worker:1") asks for: its own entry, else its job's, else nothing."""
    for key in (task, task.partition(":")[0]):
        if key in resources:
            return resources[key]
    return {}


def plan_placement(
    tasks: list[str],
    nodes: list[dict],
    placement: str,
    resources: dict[str, dict[str, float]],
) -> dict[str, str]:
    """``{task: node id}`` for ``tasks`` over ``nodes`` (``{"id", "ip", "free": {resource: amount}}``).

    Deterministic: nodes by id. ``"spread"`` deals the tasks round-robin over the nodes
    with CPUs, ``"pack"`` puts each task on the first node that still fits it. A task
    whose request fits no node raises ``DtfkitError`` naming the task and the request.

    Example::

        >>> nodes = [{"id": "b", "free": {"CPU": 1}}, {"id": "a", "free": {"CPU": 1}}]
        >>> plan_placement(["ps:0", "worker:0", "worker:1"], nodes, "spread", {})
        {'ps:0': 'a', 'worker:0': 'b', 'worker:1': 'a'}
        >>> plan_placement(["ps:0", "worker:0"], nodes, "pack", {})
        {'ps:0': 'a', 'worker:0': 'a'}
    """
    _check_placement(placement)
    ordered = sorted(nodes, key=lambda n: n["id"])
    candidates = [n for n in ordered if n["free"].get("CPU", 0) > 0] or ordered
    if not candidates:
        raise DtfkitError(_("the Ray cluster has no alive node to place tasks on"))
    free = {n["id"]: dict(n["free"]) for n in ordered}
    plan: dict[str, str] = {}
    turn = 0
    for task in tasks:
        want = resources_of(resources, task)
        fits = [n for n in candidates if all(free[n["id"]].get(k, 0.0) >= v for k, v in want.items())]
        if not fits:
            have = "; ".join(f"{n['id'][:8]}: {_short(free[n['id']])}" for n in ordered)
            raise DtfkitError(
                _(
                    "{task} asks for {wanted}, and no node of the Ray cluster has that left "
                    "(free per node, after the tasks placed before it: {free}). Nothing was started. "
                    "Next step: ask for less (resources=), fewer tasks, or add nodes with those resources."
                ).format(task=task, wanted=_short(want), free=have)
            )
        if placement == "spread":
            # The next node in turn that fits.
            chosen = next(n for n in candidates[turn:] + candidates[:turn] if n in fits)
            turn = candidates.index(chosen) + 1
        else:
            chosen = fits[0]
        for k, v in want.items():
            free[chosen["id"]][k] = free[chosen["id"]].get(k, 0.0) - v
        plan[task] = chosen["id"]
    return plan


def _short(amounts: dict[str, float]) -> str:
    shown = {k: (int(v) if float(v).is_integer() else round(v, 2)) for k, v in amounts.items()}
    return str(shown) if shown else _("nothing")


def _check_placement(placement: object) -> None:
    if placement not in PLACEMENTS:
        raise DtfkitError(
            _("placement must be one of {placements}, not {placement!r}").format(
                placements=", ".join(PLACEMENTS), placement=placement
            )
        )


def _actor_options(want: dict[str, float]) -> dict[str, Any]:
    options: dict[str, Any] = {"num_cpus": want.get("CPU", 0.0), "num_gpus": want.get("GPU", 0.0)}
    if "memory" in want:
        options["memory"] = want["memory"]
    custom = {k: v for k, v in want.items() if k not in ("CPU", "GPU", "memory")}
    if custom:
        options["resources"] = custom
    return options


def _is_dead(exc: BaseException) -> bool:
    ray = require_ray()
    return isinstance(exc, ray.exceptions.RayActorError) and not isinstance(
        exc, ray.exceptions.ActorUnavailableError
    )


class _Pending:
    """One long-poll call in flight: asked once, waited on in slices, asked again only once answered."""

    def __init__(self, make):
        self.make = make
        self.ref = None

    def get(self, timeout: float):
        """The call's answer, or raises ``TimeoutError`` (ask again later: the same call stays in flight)."""
        ray = require_ray()
        if self.ref is None:
            self.ref = self.make()
        ready, _ = ray.wait([self.ref], timeout=timeout)
        if not ready:
            raise TimeoutError
        ref, self.ref = self.ref, None
        return ray.get(ref)


class RayRelay:
    """The owner's end of a task's control connection, through its actor.

    Behaves like a ``multiprocessing`` connection for the runtime: ``send(obj)``,
    ``recv()`` (``EOFError`` at the end), ``close()``.
    """

    def __init__(self, handle: RayTaskHandle):
        self.handle = handle
        self.buffer: collections.deque[bytes] = collections.deque()
        self.eof = False
        self.closed = False
        self._poll = _Pending(lambda: handle.actor.recv.remote(POLL_SECONDS))

    def send(self, obj: Any) -> None:
        ray = require_ray()
        data = bytes(ForkingPickler.dumps(obj))
        try:
            ray.get(self.handle.actor.send.remote(data), timeout=START_REPLY_SECONDS + RPC_SLACK)
        except Exception as exc:  # noqa: BLE001 - any failure means the task cannot be reached
            raise ConnectionError(_("through its Ray actor: {reason}").format(reason=_reason(exc))) from None

    def recv(self) -> Any:
        while not self.buffer:
            if self.eof or self.closed:
                raise EOFError
            try:
                batch, self.eof = self._poll.get(POLL_SECONDS + RPC_SLACK)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - the actor is gone: the connection ended
                self.eof = True
                continue
            self.buffer.extend(batch)
        return pickle.loads(self.buffer.popleft())

    def fileno(self) -> int:
        raise OSError("a Ray relay has no file descriptor")

    def close(self) -> None:
        self.closed = True


class RayTaskHandle(ReportedExit, TaskHandle):
    """One task started by a ``TaskActor``. ``poll()`` makes no remote call: the exit code
    comes with the end of the output stream (or the actor's death: -9)."""

    def __init__(
        self, launcher: RayLauncher, actor: Any, start_ref: Any, task: str, node_id: str, host: str
    ) -> None:  # actor: a TaskActor handle, start_ref: its start()'s ObjectRef
        self.launcher = launcher
        self.host = host
        self.actor = actor
        self.start_ref = start_ref
        self.task = task
        self.node_id = node_id
        self._info: dict | None = None
        self._ended = threading.Event()
        self._lines: collections.deque[bytes] = collections.deque()
        self._read = _Pending(lambda: actor.read_lines.remote(POLL_SECONDS))
        self.connection = RayRelay(self)

    def info(self) -> dict:
        """What the actor said when it started the task (pid, node); waits for it once, bounded."""
        if self._info is None:
            ray = require_ray()
            try:
                self._info = ray.get(self.start_ref, timeout=START_REPLY_SECONDS)
            except Exception as exc:  # noqa: BLE001
                return {"pid": -1, "started": None, "node_id": self.node_id, "error": _reason(exc)}
        return self._info

    @property
    def pid(self) -> int:
        return self.info().get("pid") or -1

    # The contract's handles know their identity when made (an attribute); this one asks its actor.
    @property
    def identity(self) -> dict[str, Any]:  # type: ignore[override]
        info = self.info()
        # "remote": `dtfkit cleanup` must never take a pid from another machine for one of this one.
        return {
            "pid": info.get("pid") or -1,
            "started": info.get("started"),
            "node": self.node_id,
            "remote": True,
        }

    def kill(self) -> None:
        ray = require_ray()
        try:
            ray.get(self.actor.kill.remote(), timeout=KILL_SECONDS)
        except Exception:  # noqa: BLE001 - not up (yet), or gone: end the actor itself
            with contextlib.suppress(Exception):
                ray.kill(self.actor)

    def read_line(self) -> bytes:
        while not self._lines:
            if self._ended_event().is_set():
                return b""
            try:
                batch, code = self._read.get(POLL_SECONDS + RPC_SLACK)
            except TimeoutError:
                continue
            except Exception as exc:  # noqa: BLE001 - the actor (or its node) is gone
                if not _is_dead(exc) and not self._start_failed():
                    continue
                why = _reason(exc)
                log.info(
                    _("dtfkit: the Ray actor of {task} ended: {reason}").format(task=self.task, reason=why)
                )
                line = _("dtfkit: the Ray actor that ran {task} ended: {reason}").format(
                    task=self.task, reason=why
                )
                self._lines.append(f"[{line}]\n".encode())
                self.exited(-9)
                continue
            self._lines.extend(batch)
            if code is not None:
                self.exited(code)
        return self._lines.popleft()

    def _start_failed(self) -> bool:
        ray = require_ray()
        ready, _ = ray.wait([self.start_ref], timeout=0)
        if not ready:
            return False
        try:
            ray.get(self.start_ref)
            return False
        except Exception:  # noqa: BLE001
            return True

    def close_output(self) -> None:
        """The task's output ended: free its actor (and the actor's folder) now, not at close."""
        self.launcher.free(self)


class RayLauncher(Launcher):
    """Every task a fresh process on a Ray node, started and relayed by a ``TaskActor``.

    Args:
        address: ``None`` starts a ``SimulatedRayCluster(nodes)`` owned by this launcher;
            ``"auto"``, ``"ray://head:10001"`` or ``"host:port"`` connects to a running one.
        placement: ``"spread"`` (round-robin over nodes, by node id) or ``"pack"``.
        resources: per job or task, what its actor asks Ray for (``{"worker": {"GPU": 1}}``).
        runtime_env: the actors' Ray ``runtime_env``; on a real cluster dtfkit is shipped
            to the nodes with ``py_modules`` unless it names ``py_modules`` itself.
        nodes: how many nodes a simulated cluster has.

    Example::

        >>> launcher = RayLauncher(address="ray://head:10001", resources={"worker": {"GPU": 1}})  # doctest: +SKIP
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        placement: str = "spread",
        resources: dict | None = None,
        runtime_env: dict | None = None,
        nodes: int = 2,
        tasks: list[str] | None = None,
    ):
        require_ray()
        _check_placement(placement)
        if address is not None and (not isinstance(address, str) or not address):
            raise DtfkitError(
                _(
                    "address must be None (a simulated cluster), 'auto', 'ray://<head>:10001' or "
                    "'<host>:<port>', not {address!r}"
                ).format(address=address)
            )
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise DtfkitError(
                _("runtime_env must be a dict (Ray's runtime_env), not {runtime_env!r}").format(
                    runtime_env=runtime_env
                )
            )
        self.address = address
        self.placement = placement
        self.resources = check_resources(resources)
        self.user_runtime_env = runtime_env
        self.nodes = nodes
        self.tasks = list(tasks or [])  # the layout's tasks, planned all at once by the first start
        self.simulated: SimulatedRayCluster | None = None
        self.connected_here = False  # this launcher called ray.init (and so ray.shutdown at close)
        self.namespace = ""
        self.plan: dict[str, str] = {}
        self.node_ips: dict[str, str] = {}
        self.node_info: list[dict] = []
        self.handles: list[RayTaskHandle] = []
        self._alive: dict[Any, RayTaskHandle] = {}  # actor -> handle, until freed
        self._lock = threading.Lock()
        self._script: tuple[str, bytes] | None = None
        self._runtime_env: dict | None = None
        self._start: RayStart | None = None

    def describe(self) -> LauncherDescription:
        nodes = dict(self.plan)
        return LauncherDescription(network="ray", start=self._start, nodes=types.MappingProxyType(nodes))

    # ------------------------------------------------------------- connect
    def _connect(self, env: dict[str, str]) -> None:
        """The first start: connect (or start a simulated cluster) and plan every task's node."""
        ray = require_ray()
        self.namespace = f"dtfkit-{env[state.CLUSTER_ENV]}"
        if ray.is_initialized():
            self._check_same_cluster(ray)
        else:
            target = self.address
            if target is None:
                self.simulated = SimulatedRayCluster(self.nodes)
                target = self.simulated.address
            try:
                options = {}
                if self.simulated is None and not is_loopback(target):
                    options["runtime_env"] = self._job_runtime_env()
                connect(target, **options)
            except Exception as exc:  # noqa: BLE001 - version mismatch, unreachable head, ...
                raise ClusterStartError(
                    _("could not connect to the Ray cluster at {address!r}: {error}").format(
                        address=target, error=f"{type(exc).__name__}: {exc}"
                    )
                    + "\n"
                    + _(
                        "Next step: check the address (ray status on the head prints it); the driver must "
                        "run the same Ray and Python minor versions as the cluster "
                        "(here: Ray {ray_version}, Python {python_version})."
                    ).format(ray_version=ray.__version__, python_version="{}.{}".format(*sys.version_info))
                ) from None
            self.connected_here = True
        self.node_info = self._alive_nodes(ray)
        self.node_ips = {n["id"]: n["ip"] for n in self.node_info}
        self.plan = plan_placement(self.tasks, self.node_info, self.placement, self.resources)
        self._runtime_env = self._actor_runtime_env()
        self._start = RayStart(self.cluster_address(), len(self.node_info), self.placement)

    def _check_same_cluster(self, ray) -> None:
        current = self.cluster_address()
        if self.address in (None, "auto") or self.address == current:
            if self.address is None:
                log.info(
                    _("dtfkit: using the Ray cluster this process is connected to ({address})").format(
                        address=current
                    )
                )
            return
        if self.address.startswith("ray://") and _client_connected():
            return
        raise DtfkitError(
            _(
                "this Python process is connected to the Ray cluster at {current} already, and Ray "
                "allows one per process, so it cannot use {address!r} too. Next step: pass "
                "address={current!r}, or call ray.shutdown() first."
            ).format(current=current, address=self.address)
        )

    def cluster_address(self) -> str:
        """The address of the Ray cluster the tasks run on (its GCS)."""
        ray = require_ray()
        try:
            return ray.get_runtime_context().gcs_address
        except Exception:  # noqa: BLE001 - Ray Client has no gcs_address
            return self.address or "?"

    @staticmethod
    def _alive_nodes(ray) -> list[dict]:
        free = {}
        with contextlib.suppress(Exception):  # a private API: else the totals
            from ray._private.state import available_resources_per_node

            free = available_resources_per_node()
        nodes = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            node_id = node["NodeID"]
            nodes.append(
                {
                    "id": node_id,
                    "ip": node.get("NodeManagerAddress", "127.0.0.1"),
                    "free": dict(free.get(node_id) or node.get("Resources", {})),
                }
            )
        return nodes

    def _job_runtime_env(self) -> dict | None:
        """What ``ray.init`` gets when this launcher connects to a real cluster: dtfkit shipped
        to the nodes with ``py_modules`` (Ray uploads a local folder only at the job level),
        unless the user's ``runtime_env`` names ``py_modules`` itself."""
        env = dict(self.user_runtime_env or {})
        if "py_modules" not in env:  # the dtfkit folder
            env["py_modules"] = [os.path.join(PACKAGE_ROOT, "dtfkit")]
        return env

    def _actor_runtime_env(self) -> dict | None:
        """Each actor's ``runtime_env``: on this machine (a simulated or loopback cluster) dtfkit
        is made importable by path; on a real one it came with the job (or the user's env)."""
        if self.simulated is None and not is_loopback(self.cluster_address()):
            return None if self.connected_here else self.user_runtime_env
        env = dict(self.user_runtime_env or {})
        variables = dict(env.get("env_vars") or {})
        variables["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, variables.get("PYTHONPATH")) if p)
        env["env_vars"] = variables
        return env

    # --------------------------------------------------------------- tasks
    def host_of(self, task: str) -> str:
        """The address of the node ``task`` runs on (its host in the ClusterSpec)."""
        return self.node_ips.get(self.plan.get(task, ""), "127.0.0.1")

    def node_of(self, task: str) -> str:
        """The short name of the node ``task`` runs on (the first 8 hex digits of its id)."""
        node_id = self.plan.get(task)
        return node_id[:8] if node_id else "-"

    def start(self, config: TaskConfig) -> TaskHandle:
        if self._start is None:
            self._connect(config.env)
        ray = require_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from dtfkit.ray.actor import TaskActor

        task = config.task
        if task not in self.plan:  # a client task, or a layout not given up front
            self.plan.update(
                plan_placement(
                    [task],
                    self._alive_nodes(ray),
                    self.placement,
                    {} if config.mode == "client" else self.resources,
                )
            )
        node_id = self.plan[task]
        script = None
        if config.mode == "script" and config.script:
            if self._script is None:
                with open(config.script, "rb") as f:
                    self._script = (os.path.basename(config.script), f.read())
            script = self._script
        options = _actor_options(resources_of(self.resources, task) if config.mode != "client" else {})
        # mypy keeps a class its decorator's type (no ActorClass here): ray.remote gave it .options.
        actor = TaskActor.options(  # type: ignore[attr-defined]
            name=f"{task}-{config.gen}",
            namespace=self.namespace,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            runtime_env=self._runtime_env,
            max_restarts=0,
            **options,
        ).remote()
        start_ref = actor.start.remote(config.to_json(), _shipped_env(config.env), config.cwd, script)
        handle = RayTaskHandle(self, actor, start_ref, task, node_id, self.host_of(task))
        with self._lock:
            self.handles.append(handle)
            self._alive[id(actor)] = handle
        return handle

    def free(self, handle: RayTaskHandle) -> None:
        """End ``handle``'s actor in the background (its task has ended)."""
        with self._lock:
            if self._alive.pop(id(handle.actor), None) is None:
                return
        threading.Thread(target=_end_actors, args=([handle.actor],), daemon=True).start()

    def close(self) -> None:
        """Kill every actor this launcher made (bounded), check they are gone, then
        disconnect and end the simulated cluster if this launcher started them."""
        ray = require_ray()
        with self._lock:
            actors = [h.actor for h in self.handles]
            self._alive.clear()
        try:
            if ray.is_initialized() and actors:
                _end_actors(actors)
                alive = [a for a in actors if not _gone(a)]
                if alive:
                    log.warning(
                        _("dtfkit: {count} Ray actor(s) still alive after close").format(count=len(alive))
                    )
        finally:
            if self.connected_here:
                ray.shutdown()
                self.connected_here = False
            if self.simulated is not None:
                self.simulated.close()


def _end_actors(actors: list) -> None:
    """Ask each actor to end its task and clean up (bounded), then kill it."""
    ray = require_ray()
    refs = []
    for actor in actors:
        with contextlib.suppress(Exception):
            refs.append(actor.shutdown.remote())
    if refs:
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_SECONDS)
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def _gone(actor, timeout: float = CLOSE_SECONDS) -> bool:
    """True once calling ``actor`` fails as a dead actor's calls do (bounded)."""
    ray = require_ray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.info.remote(), timeout=max(0.1, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - else a timeout: ask again
            if _is_dead(exc):
                return True
    return False


def _shipped_env(env: dict[str, str]) -> dict[str, str]:
    """What a node must add to its own environment: what dtfkit and the user's ``env=`` set
    (what differs from the driver's environment), never what only describes the driver's machine."""
    out = {}
    for key, value in env.items():
        if key in _LOCAL_ONLY_ENV:
            continue
        if key.startswith("DTFKIT_") or key == "PYTHONPATH" or os.environ.get(key) != value:
            out[key] = value
    return out


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300]


def _client_connected() -> bool:
    try:
        from ray.util.client import ray as client

        return client.is_connected()
    except Exception:  # noqa: BLE001
        return False
