"""A real JupyterHub for the classroom bench and tests (runs in the bench's process; starts the hub as root).

:class:`Hub` starts ``jupyterhub`` with :file:`jupyterhub_config.py` beside this module (configurable-http-proxy
from npm, :class:`~hubbench.spawner.LimitedSpawner`, the dummy authenticator) on free loopback ports, in
a private state folder, and waits for its REST API to answer. Leaving the ``with`` block stops the hub, which
stops every student's server (``cleanup_servers``), and the proxy, and checks that none of them is left.

Example::

    with Hub(users=["dtfk1a2bs1"], password=secrets.token_urlsafe()) as hub:
        hub.api("GET", "/users")            # as the bench's service, through the proxy
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from dtfkit.ports import free_ports

CONFIG = Path(__file__).with_name("jupyterhub_config.py")


def tool_path() -> str:
    """``PATH`` with this interpreter's own ``bin`` folder first.

    The bench's tools (``jupyterhub``'s database migrations, nbgrader's ``alembic``) are commands of the
    environment the bench runs in; ``sudo /path/to/venv/bin/python -m dtfkit classroom-bench`` runs it with
    that environment not activated, so they are not on the caller's ``PATH``.

    Example::

        >>> tool_path().split(os.pathsep)[0] == os.path.dirname(sys.executable)
        True
    """
    own = os.path.dirname(sys.executable)
    rest = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p and p != own]
    return os.pathsep.join([own, *rest])


def missing_tools() -> list[str]:
    """Commands the bench runs that this interpreter's environment (or ``PATH``) lacks, each with how to get it."""
    problems = []
    if shutil.which("alembic", path=tool_path()) is None:
        problems.append(
            f"nbgrader needs the 'alembic' command, and neither {os.path.dirname(sys.executable)} nor PATH has it: "
            f"{sys.executable} -m pip install alembic (nbgrader's own dependency: reinstall 'dtfkit[hub]')"
        )
    return problems


def proxy_command() -> str:
    """The configurable-http-proxy executable, or a RuntimeError that says how to install it."""
    found = os.environ.get("DTFKIT_HUB_PROXY") or shutil.which("configurable-http-proxy")
    if not found:
        raise RuntimeError(
            "JupyterHub needs configurable-http-proxy, which is not on PATH: install Node.js and npm "
            "(Debian: apt-get install nodejs npm), then `npm install -g configurable-http-proxy`"
        )
    return found


def open_for_students(paths: list[str], listed: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """Let every account traverse the folders above ``paths`` (o+x, no listing), and also list the folders
    ``listed`` (o+rx: Python reads an import path's folder to find a module there); returns what to restore.

    Students' servers run the hub's Python and import dtfkit from this checkout. Where those live under a
    private folder (pyenv under ``/root``, mode 0700, as on the kit's build machine; a checkout cloned into
    ``mktemp -d``) the students could not start at all; a class's hub installs Python where every account can
    run it, and needs none of this.
    """
    changed: list[tuple[str, int]] = []

    def grant(folder: str, bits: int) -> None:
        mode = os.stat(folder).st_mode & 0o7777
        if mode & bits != bits:
            if not any(f == folder for f, _ in changed):
                changed.append((folder, mode))
            os.chmod(folder, mode | bits)

    for path in paths:
        folder = os.path.dirname(os.path.realpath(path))
        while folder != "/":
            grant(folder, 0o001)
            folder = os.path.dirname(folder)
    for folder in listed:
        grant(os.path.realpath(folder), 0o005)
    return changed


def checkout() -> str:
    """The folder dtfkit is imported from (the checkout's root, on the students' import path)."""
    return str(Path(__file__).resolve().parents[1])


def restore_modes(changed: list[tuple[str, int]]) -> None:
    for folder, mode in reversed(changed):
        os.chmod(folder, mode)


class HubError(RuntimeError):
    """The hub did not start or answer; the message ends with the tail of its log."""


class Hub:
    """A JupyterHub process with its proxy (see the module's docstring)."""

    def __init__(
        self,
        users: list[str],
        password: str,
        *,
        mem_limit: str = "3G",
        max_pids: int = 4096,
        zygote: bool = True,
        start_timeout: float = 120.0,
        extra_env: dict[str, str] | None = None,
        lang: str | None = None,
    ) -> None:
        if os.geteuid() != 0:
            raise PermissionError("a hub that spawns servers as other users runs as root")
        self.users = list(users)
        self.password = password
        self.token = secrets.token_hex(32)
        self.state = Path(tempfile.mkdtemp(prefix="dtfkit-hub-"))
        self.port, self.api_port, self.proxy_api_port = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.state / "jupyterhub.log"
        self.start_timeout = start_timeout
        repo = str(Path(__file__).resolve().parents[1])
        self.env = {
            **os.environ,
            "DTFKIT_HUB_STATE": str(self.state),
            "DTFKIT_HUB_PORT": str(self.port),
            "DTFKIT_HUB_API_PORT": str(self.api_port),
            "DTFKIT_HUB_PROXY_API_PORT": str(self.proxy_api_port),
            "DTFKIT_HUB_PROXY": proxy_command(),
            "DTFKIT_HUB_PASSWORD": password,
            "DTFKIT_HUB_USERS": ",".join(self.users),
            "DTFKIT_HUB_SERVICE_TOKEN": self.token,
            "DTFKIT_HUB_MEM_LIMIT": mem_limit,
            "DTFKIT_HUB_MAX_PIDS": str(max_pids),
            "DTFKIT_HUB_ZYGOTE": "1" if zygote else "0",
            "DTFKIT_HUB_LANG": lang or "",
            # the hub imports hubbench.spawner, and the students' servers dtfkit, from this checkout
            "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p),
            "DTFKIT_HUB_PYTHONPATH": repo,
            "PATH": tool_path(),
            **(extra_env or {}),
        }
        self.process: subprocess.Popen | None = None
        self.opened: list[tuple[str, int]] = []

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Hub:
        self.opened = open_for_students([sys.executable, str(Path(__file__).resolve())], listed=(checkout(),))
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)],
            cwd=self.state,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the hub and its proxy form one process group the harness can end
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.process.poll() is not None:
                raise HubError(
                    f"jupyterhub exited with {self.process.returncode} while starting:\n{self.log_tail()}"
                )
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=2).ok:
                    return self
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise HubError(
                    f"jupyterhub did not answer within {self.start_timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.2)  # poll: the hub has no readiness signal but its API answering

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM the hub (it stops every server and its proxy), bounded; SIGKILL what is left of its group."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the proxy, if the hub could not stop it
        except ProcessLookupError:
            pass
        self.process.wait(10)
        self.process = None
        restore_modes(self.opened)
        self.opened = []

    def cleanup(self) -> None:
        shutil.rmtree(self.state, ignore_errors=True)
        restore_modes(self.opened)
        self.opened = []

    def __enter__(self) -> Hub:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()

    # -------------------------------------------------------------- using it
    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the hub's REST API as the bench's service; the decoded JSON, or None for an empty reply."""
        r = requests.request(
            method,
            f"{self.url}/hub/api{path}",
            headers={"Authorization": f"token {self.token}"},
            timeout=kwargs.pop("timeout", 60),
            **kwargs,
        )
        if not r.ok:
            raise HubError(f"{method} /hub/api{path}: HTTP {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def listening(self) -> list[int]:
        """Which of the hub's three ports still accept connections (all empty after stop)."""
        open_ports = []
        for port in (self.port, self.api_port, self.proxy_api_port):
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    open_ports.append(port)
        return open_ports
