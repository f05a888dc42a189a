"""A simulated Kubeflow operator: run a TFJob manifest's replicas as local processes.

For each replica (``ps-0``, ``worker-1`` ...) it does what the operator and the kubelet would:
the manifest is checked first (``dtfkit.kube.validate``); the ``tensorflow`` container's command
runs with the container's env and the exact ``TF_CONFIG`` the operator writes, except that each
service address ``<job>-<type>-<i>.<ns>.svc:2222`` is replaced by ``127.0.0.1:<a free port>``
(printed at the start); the ConfigMaps the pod mounts are written to a temporary folder that stands
in for the mount path (which is rewritten in the command); ``python`` in the command is this
interpreter. Each replica is its own process in its own session, its output prefixed with its name.
The job's verdict follows the operator's rules (``successPolicy``), and when the job ends,
``cleanPodPolicy`` is applied: with ``Running`` (or ``All``) the pods still running (the ps) are
deleted, here killed; with ``None`` they are left, here ended too. Nothing is left running on any
way out, Ctrl-C included.

Command line::

    python -m dtfkit export tfjob --ps 1 --workers 2 --image IMG SCRIPT -- ARGS | python -m dtfkit.kube.simulate -

Example::

    >>> from dtfkit.kube import export_tfjob, simulate
    >>> text = export_tfjob("dtfkit/examples/distributed_mnist.py", image="x", args=["--train_steps=60"])
    >>> result = simulate(text, timeout=300)  # doctest: +SKIP
    >>> result.verdict, result.replicas["ps-0"].outcome  # doctest: +SKIP
    ('Succeeded', 'deleted by cleanPodPolicy Running')
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dtfkit.engine.platform.groups import kill_group, spawn_group
from dtfkit.errors import DtfkitError, exit_code
from dtfkit.i18n import N_, _, joined
from dtfkit.kube import controller
from dtfkit.kube.validate import check_manifest
from dtfkit.ports import free_ports

PYTHON_NAMES = ("python", "python3")


@dataclass
class ReplicaRun:
    """One replica as the simulator ran it.

    ``outcome`` is ``"exited 0"``, ``"deleted by cleanPodPolicy Running"``, ``"left running by
    cleanPodPolicy None (ended by the simulator)"`` or ``"ended by the simulator's timeout"``: in English
    whatever the language, for code to compare; ``shown_outcome`` is the same in the reader's language.
    """

    name: str
    replica_type: str
    index: int
    service: str
    address: str
    operator_tf_config: str
    tf_config: str
    command: list[str]
    exit_code: int | None = None
    outcome: str = "not started"
    shown_outcome: str = field(default_factory=lambda: _("not started"))
    output: list[str] = field(default_factory=list)
    pid: int | None = None


@dataclass
class SimulationResult:
    """What the simulated operator did: the job's verdict and every replica's run.

    Example::

        >>> result.ok, result.replicas["worker-0"].exit_code  # doctest: +SKIP
        (True, 0)
    """

    job: str
    namespace: str
    verdict: str  # "Succeeded", "Failed" or "Timeout"
    reason: str
    clean_pod_policy: str
    replicas: dict[str, ReplicaRun]
    mapping: dict[str, str]
    seconds: float

    @property
    def ok(self) -> bool:
        return self.verdict == "Succeeded"

    def headline(self) -> str:
        """``TFJob default/name Succeeded (why)``: the verdict, in the reader's language (the state as the operator names it)."""
        return _("TFJob {job} {verdict} ({reason})").format(
            job=f"{self.namespace}/{self.job}", verdict=self.verdict, reason=self.reason
        )

    def summary(self) -> str:
        parts = joined(f"{r.name} {r.shown_outcome}" for r in self.replicas.values())
        return _("{headline} in {seconds:.1f} s: {replicas}").format(
            headline=self.headline(), seconds=self.seconds, replicas=parts
        )


def _mapped(text: str, mapping: dict[str, str]) -> str:
    config = json.loads(text)
    config["cluster"] = {job: [mapping[a] for a in hosts] for job, hosts in config["cluster"].items()}
    return json.dumps(config, separators=(",", ":"))


def _materialise(
    pod: dict, container: dict, configmaps: dict[str, dict], root: Path, where: str
) -> dict[str, str]:
    """Write the pod's volumes under ``root``; return ``{mountPath: local folder}`` for the container."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    mounts = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"))
        if volume is None:
            raise DtfkitError(
                f"{where}: "
                + _("volumeMount {name!r} names no volume of the pod; add it").format(name=mount.get("name"))
            )
        folder = root / "volumes" / mount["name"]
        if "configMap" in volume:
            cm_name = volume["configMap"].get("name")
            if cm_name not in configmaps:
                raise DtfkitError(
                    f"{where}: "
                    + _(
                        "the pod mounts ConfigMap {name!r}, which is not in the manifest: "
                        "the simulator only has the manifest's own ConfigMaps; add it to the manifest"
                    ).format(name=cm_name)
                )
            data = configmaps[cm_name].get("data") or {}
            items = volume["configMap"].get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                target = folder / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]], encoding="utf-8")
        elif "emptyDir" in volume:
            folder.mkdir(parents=True, exist_ok=True)
        else:
            kind = next((k for k in volume if k != "name"), "?")
            raise DtfkitError(
                f"{where}: "
                + _("cannot simulate a {kind} volume; only configMap and emptyDir ones").format(kind=kind)
            )
        mounts[mount["mountPath"].rstrip("/") or "/"] = str(folder)
    return mounts


def _rewrite(text: str, mounts: dict[str, str]) -> str:
    for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):

        def as_is(_match: re.Match[str], value: str = local) -> str:
            return value  # the folder as it is (a replacement string would read its backslashes)

        text = re.sub(re.escape(mount_path) + r"(?=/|$|\s)", as_is, text)
    return text


class _Simulation:
    def __init__(self, docs: list[dict], env: dict[str, str] | None, echo: Callable[[str], None] | None):
        jobs = [d for d in docs if d.get("kind") == "TFJob"]
        if len(jobs) != 1:
            raise DtfkitError(
                _("the manifest holds {count} TFJobs; the simulator runs exactly one").format(count=len(jobs))
            )
        self.job = jobs[0]
        self.configmaps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
        self.base_env = dict(os.environ if env is None else env)
        self.echo = echo
        self.events: queue.Queue = queue.Queue()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.readers: list[threading.Thread] = []
        self.runs: dict[str, ReplicaRun] = {}
        self.mapping: dict[str, str] = {}

    def say(self, line: str) -> None:
        if self.echo is not None:
            self.echo(line)

    def note(self, text: str) -> None:
        self.say(f"[simulator] {text}")

    def plan(self, root: Path) -> list[tuple[ReplicaRun, dict[str, str], str]]:
        counts = controller.replica_counts(self.job)
        services = [
            (t, i, controller.service_address(self.job, t, i)) for t, n in counts.items() for i in range(n)
        ]
        for (_type, _index, service), port in zip(services, free_ports(len(services)), strict=True):
            self.mapping[service] = f"127.0.0.1:{port}"
        plans = []
        for rtype, index, service in services:
            name = f"{rtype.lower()}-{index}"
            where = _("replica {name}").format(name=name)
            pod = self.job["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]
            container = controller.tensorflow_container(self.job, rtype)
            mounts = _materialise(pod, container, self.configmaps, root / name, where)
            command = list(container.get("command") or []) + list(container.get("args") or [])
            if not command:
                raise DtfkitError(
                    f"{where}: "
                    + _(
                        "the tensorflow container has no command or args; the simulator cannot run "
                        "an image's own entrypoint: give the container a command"
                    )
                )
            command = [_rewrite(str(a), mounts) for a in command]
            if Path(command[0]).name in PYTHON_NAMES:
                command[0] = sys.executable
            real = controller.operator_tf_config(self.job, rtype, index)
            local = _mapped(real, self.mapping) if real else ""
            env = {k: v for k, v in self.base_env.items() if k != "TF_CONFIG"}
            for var in container.get("env") or []:
                if "value" in var:
                    env[var["name"]] = _rewrite(str(var["value"]), mounts)
                else:
                    self.note(
                        _("{replica}: env {variable} comes from valueFrom, which is not simulated").format(
                            replica=name, variable=var["name"]
                        )
                    )
            if local:
                env["TF_CONFIG"] = local
            env["HOSTNAME"] = f"{self.job['metadata']['name']}-{name}"
            cwd = root / name / "workdir"
            cwd.mkdir(parents=True, exist_ok=True)
            workdir = _rewrite(container["workingDir"], mounts) if container.get("workingDir") else str(cwd)
            run = ReplicaRun(name, rtype, index, service, self.mapping[service], real, local, command)
            plans.append((run, env, workdir))
        return plans

    def _read(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None  # spawn_group's pipe
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.runs[name].output.append(line)
            self.say(f"[{name}] {line}")

    def _wait(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        self.events.put((name, proc.wait()))

    def start(self, plans) -> None:
        for run, env, workdir in plans:
            self.runs[run.name] = run
            try:
                # Its own process group: deleting the "pod" ends all of it.
                proc = spawn_group(run.command, env, workdir)
            except OSError as exc:
                raise DtfkitError(
                    _(
                        "replica {name}: cannot start {program!r} ({error}); the simulator runs the "
                        "container command on this machine, so that program must exist here"
                    ).format(name=run.name, program=run.command[0], error=exc)
                ) from None
            self.procs[run.name] = proc
            run.pid = proc.pid
            _set_outcome(run, N_("running"))
            for target in (self._read, self._wait):
                thread = threading.Thread(target=target, args=(run.name, proc), daemon=True)
                thread.start()
                self.readers.append(thread)

    def watch(self, deadline: float) -> tuple[str, str]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "Timeout", _("the simulator's timeout passed before the operator would decide")
            try:
                name, returncode = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            run = self.runs[name]
            run.exit_code = controller.container_exit_code(returncode)
            _set_outcome(run, EXITED, code=run.exit_code)
            self.note(_("{replica} exited {code}").format(replica=name, code=run.exit_code))
            codes = {(r.replica_type, r.index): r.exit_code for r in self.runs.values()}
            verdict = controller.job_verdict(self.job, codes)
            if verdict is not None:
                state, reason = verdict
                policy = self.job["spec"]["tfReplicaSpecs"][run.replica_type].get("restartPolicy", "Never")
                if state == "Failed" and controller.restarts(policy, run.exit_code):
                    reason += "; " + _(
                        "the operator would start it again (restartPolicy {policy}): not simulated"
                    ).format(policy=policy)
                return state, reason

    def clean(self, verdict: str, grace: float) -> str:
        policy = (self.job["spec"].get("runPolicy") or {}).get("cleanPodPolicy")
        policy = "None" if policy is None else policy  # SetDefaults_TFJob
        for name, proc in self.procs.items():
            run = self.runs[name]
            if run.exit_code is None and proc.poll() is not None:  # exited while the verdict was made
                run.exit_code = controller.container_exit_code(proc.returncode)
                _set_outcome(run, EXITED, code=run.exit_code)
            if run.exit_code is not None:
                continue
            if verdict == "Timeout":
                _set_outcome(run, N_("ended by the simulator's timeout"))
            elif controller.pods_deleted_at_end(policy, running=True):
                _set_outcome(run, N_("deleted by cleanPodPolicy {policy}"), policy=policy)
            else:
                _set_outcome(
                    run, N_("left running by cleanPodPolicy {policy} (ended by the simulator)"), policy=policy
                )
            self.note(f"{name}: {run.shown_outcome}")
            kill_group(proc, grace=grace)
        return policy

    def end_all(self) -> None:
        for proc in self.procs.values():
            # The replica, or what it started in its group after it exited.
            kill_group(proc, leftovers=True)
        for thread in self.readers:
            thread.join(timeout=10)


EXITED = N_("exited {code}")


def _set_outcome(run: ReplicaRun, template: str, **fields: object) -> None:
    """A replica's outcome: in English (``outcome``, for code) and in the reader's language (``shown_outcome``)."""
    run.outcome = template.format(**fields)
    run.shown_outcome = _(template).format(**fields)


def simulate(
    manifest: str | list[dict],
    *,
    timeout: float = 600.0,
    grace: float = 5.0,
    env: dict[str, str] | None = None,
    echo: bool | Callable[[str], None] = True,
) -> SimulationResult:
    """Check ``manifest`` (YAML text or parsed documents), then run its TFJob locally as the operator would.

    ``timeout`` bounds the whole run (``runPolicy.activeDeadlineSeconds`` too, when shorter);
    ``grace`` is the seconds between SIGTERM and SIGKILL when a pod is deleted (Kubernetes gives 30);
    ``env`` is the environment the containers start from (default: this process's);
    ``echo`` prints each replica's lines prefixed with its name (a callable receives them instead).

    Example::

        >>> result = simulate(open("job.yaml").read(), timeout=300)  # doctest: +SKIP
        >>> print(result.summary())  # doctest: +SKIP
        TFJob default/distributed-mnist Succeeded (every worker succeeded) in 21.0 s: ps-0 deleted by ...
    """
    docs = check_manifest(manifest)
    printer = (lambda line: print(line, flush=True)) if echo is True else (echo or None)
    sim = _Simulation(docs, env, printer)
    meta = sim.job["metadata"]
    namespace = meta.get("namespace", "default")
    deadline_s = sim.job["spec"].get("runPolicy", {}).get("activeDeadlineSeconds")
    limit = min(timeout, deadline_s) if deadline_s else timeout
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dtfkit-tfjob-") as tmp:
        try:
            plans = sim.plan(Path(tmp))
            sim.note(_("TFJob {job}:").format(job=f"{namespace}/{meta['name']}"))
            for service, local in sim.mapping.items():
                sim.note(f"  {service} -> {local}")
            sim.note(_("'python' in the container command runs as {python}").format(python=sys.executable))
            sim.start(plans)
            verdict, reason = sim.watch(started + limit)
            if verdict == "Timeout" and deadline_s and deadline_s <= timeout:
                verdict = "Failed"
                reason = _("runPolicy.activeDeadlineSeconds ({seconds} s) passed").format(seconds=deadline_s)
            sim.note(_("job {verdict}: {reason}").format(verdict=verdict, reason=reason))
            policy = sim.clean(verdict, grace)
        finally:
            sim.end_all()
    return SimulationResult(
        job=meta["name"],
        namespace=namespace,
        verdict=verdict,
        reason=reason,
        clean_pod_policy=policy,
        replicas=sim.runs,
        mapping=dict(sim.mapping),
        seconds=time.monotonic() - started,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m dtfkit.kube.simulate FILE|- [--timeout S]``: 0 if the job succeeded, 1 if not, 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m dtfkit.kube.simulate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("manifest", help=_("a TFJob manifest (YAML), or - to read it from standard input"))
    parser.add_argument(
        "--timeout", type=float, default=600.0, help=_("seconds before every replica is stopped")
    )
    parser.add_argument("--grace", type=float, default=5.0, help=_("seconds between SIGTERM and SIGKILL"))
    ns = parser.parse_args(argv)

    def run() -> int:
        try:
            text = sys.stdin.read() if ns.manifest == "-" else Path(ns.manifest).read_text(encoding="utf-8")
        except OSError as exc:
            raise DtfkitError(_("cannot read {path}: {error}").format(path=ns.manifest, error=exc)) from None
        result = simulate(text, timeout=ns.timeout, grace=ns.grace)
        print(f"[simulator] {result.summary()}", flush=True)
        return 0 if result.ok else 1

    return exit_code("dtfkit.kube.simulate", _("every replica was stopped"), run)


if __name__ == "__main__":
    sys.exit(main())
