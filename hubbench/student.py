"""One student driven through the hub, as the browser would (runs in a thread of the bench's process).

:class:`Student` logs in with the hub's login form, asks the hub's REST API for a token, starts their
single-user server and follows the hub's progress events until it is ready, opens a kernel through the
server's REST API and runs code over the kernel's websocket (the Jupyter messaging protocol), and saves
notebooks through the contents API, so every file it writes belongs to the student's own system user.

Example::

    s = Student(hub.url, "dtfk1a2bs1", password)
    s.login(); s.start_server(); s.open_kernel()
    run = s.execute("print(1 + 1)")
    run.text            # '2\\n'
    s.close()
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import requests
import websocket


class StudentError(RuntimeError):
    """A step of a student's session failed; the message names the student and the step."""


@dataclass
class CellRun:
    """One execute_request and what came back."""

    code: str
    status: str = "?"  # "ok", "error", "timeout"
    outputs: list[dict[str, Any]] = field(default_factory=list)  # nbformat v4 outputs
    started: float = 0.0  # time.monotonic() when sent
    finished: float = 0.0  # when the kernel went idle

    @property
    def seconds(self) -> float:
        return self.finished - self.started

    @property
    def text(self) -> str:
        """Every stream, result and error of the cell as text."""
        parts = []
        for out in self.outputs:
            if out["output_type"] == "stream":
                parts.append(out["text"])
            elif out["output_type"] in ("execute_result", "display_data"):
                parts.append(out["data"].get("text/plain", ""))
            elif out["output_type"] == "error":
                parts.append(f"{out['ename']}: {out['evalue']}")
        return "".join(parts)


class Student:
    """A student's session on the hub (see the module's docstring)."""

    def __init__(self, hub_url: str, name: str, password: str) -> None:
        self.hub_url = hub_url
        self.name = name
        self.password = password
        self.http = requests.Session()
        self.token: str | None = None
        self.kernel_id: str | None = None
        self.ws: websocket.WebSocket | None = None
        self.session_id = uuid.uuid4().hex

    # -------------------------------------------------------------- the hub
    def _fail(self, step: str, detail: str) -> StudentError:
        return StudentError(f"student {self.name}: {step} failed: {detail}")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def login(self) -> None:
        """The login form (as a browser posts it), then a token of the student's own from the REST API."""
        r = self.http.get(f"{self.hub_url}/hub/login", timeout=60)
        xsrf = self.http.cookies.get("_xsrf")
        if not r.ok or not xsrf:
            raise self._fail("opening the login page", f"HTTP {r.status_code}, xsrf cookie {xsrf!r}")
        r = self.http.post(
            f"{self.hub_url}/hub/login",
            data={"username": self.name, "password": self.password, "_xsrf": xsrf},
            allow_redirects=False,  # the redirect would spawn the server; the bench does that itself, timed
            timeout=60,
        )
        if r.status_code != 302 or "jupyterhub-session-id" not in self.http.cookies:
            raise self._fail("logging in", f"HTTP {r.status_code}: {r.text[:300]}")
        r = self.http.post(
            f"{self.hub_url}/hub/api/users/{self.name}/tokens",
            json={"note": "dtfkit classroom bench", "expires_in": 4 * 3600},
            headers={"X-XSRFToken": self.http.cookies.get("_xsrf") or xsrf},
            timeout=60,
        )
        if not r.ok:
            raise self._fail("asking for an API token", f"HTTP {r.status_code}: {r.text[:300]}")
        self.token = r.json()["token"]

    def start_server(self, timeout: float = 600.0) -> float:
        """Start the single-user server; returns when the hub's progress events say it is ready (seconds)."""
        t0 = time.monotonic()
        r = self.http.post(
            f"{self.hub_url}/hub/api/users/{self.name}/server", headers=self._headers(), timeout=60
        )
        if r.status_code not in (201, 202):
            raise self._fail("starting the server", f"HTTP {r.status_code}: {r.text[:300]}")
        if r.status_code == 202:  # pending: follow the progress stream (server-sent events) to the end
            with self.http.get(
                f"{self.hub_url}/hub/api/users/{self.name}/server/progress",
                headers=self._headers(),
                stream=True,
                timeout=(60, timeout),
            ) as events:
                ready = False
                for raw in events.iter_lines():
                    line = raw.decode("utf-8", "replace")
                    if line.startswith("data:"):
                        event = json.loads(line[5:])
                        if event.get("failed"):
                            raise self._fail("starting the server", event.get("message", "the spawn failed"))
                        if event.get("ready"):
                            ready = True
                            break
                    if time.monotonic() - t0 > timeout:
                        break
                if not ready:
                    raise self._fail("starting the server", f"not ready after {time.monotonic() - t0:.0f} s")
        return time.monotonic() - t0

    # -------------------------------------------------------------- the server
    def server(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A request to the student's own server through the proxy, with the student's token."""
        return self.http.request(
            method, f"{self.hub_url}/user/{self.name}{path}", headers=self._headers(), timeout=60, **kwargs
        )

    def put_notebook(self, path: str, notebook: dict) -> None:
        r = self.server(
            "PUT", f"/api/contents/{path}", json={"type": "notebook", "format": "json", "content": notebook}
        )
        if not r.ok:
            raise self._fail(f"saving {path}", f"HTTP {r.status_code}: {r.text[:300]}")

    def get_notebook(self, path: str) -> dict:
        r = self.server("GET", f"/api/contents/{path}?content=1&type=notebook")
        if not r.ok:
            raise self._fail(f"reading {path}", f"HTTP {r.status_code}: {r.text[:300]}")
        return r.json()["content"]

    def open_kernel(self, notebook_path: str | None = None) -> None:
        """A kernel for ``notebook_path`` (a session, as JupyterLab opens one), and its websocket."""
        if notebook_path:
            r = self.server(
                "POST",
                "/api/sessions",
                json={
                    "path": notebook_path,
                    "name": notebook_path,
                    "type": "notebook",
                    "kernel": {"name": "python3"},
                },
            )
            self.kernel_id = r.json()["kernel"]["id"] if r.ok else None
        else:
            r = self.server("POST", "/api/kernels", json={"name": "python3"})
            self.kernel_id = r.json()["id"] if r.ok else None
        if not r.ok:
            raise self._fail("opening a kernel", f"HTTP {r.status_code}: {r.text[:300]}")
        ws_url = (
            self.hub_url.replace("http", "ws", 1) + f"/user/{self.name}/api/kernels/{self.kernel_id}/channels"
        )
        self.ws = websocket.create_connection(
            f"{ws_url}?session_id={self.session_id}",
            header=[f"Authorization: token {self.token}"],
            timeout=60,
        )

    def execute(self, code: str, timeout: float = 600.0) -> CellRun:
        """Run ``code`` in the kernel as a notebook cell; waits for the kernel to be idle again (bounded)."""
        if self.ws is None:
            raise self._fail("running a cell", "no kernel is open (call open_kernel first)")
        msg_id = uuid.uuid4().hex
        self.ws.send(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "username": self.name,
                        "session": self.session_id,
                        "msg_type": "execute_request",
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )
        run = CellRun(code=code, started=time.monotonic())
        idle = replied = False
        deadline = run.started + timeout
        while not (idle and replied):
            left = deadline - time.monotonic()
            if left <= 0:
                run.status = "timeout"
                run.finished = time.monotonic()
                return run
            self.ws.settimeout(left)
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                idle = True
            elif kind == "execute_reply":
                replied = True
                run.status = content.get("status", "?")
            elif kind == "stream":
                run.outputs.append(
                    {"output_type": "stream", "name": content["name"], "text": content["text"]}
                )
            elif kind in ("execute_result", "display_data"):
                out = {"output_type": kind, "data": content["data"], "metadata": content.get("metadata", {})}
                if kind == "execute_result":
                    out["execution_count"] = content.get("execution_count")
                run.outputs.append(out)
            elif kind == "error":
                run.outputs.append(
                    {
                        "output_type": "error",
                        "ename": content["ename"],
                        "evalue": content["evalue"],
                        "traceback": content["traceback"],
                    }
                )
        run.finished = time.monotonic()
        return run

    def close(self) -> None:
        """Close the websocket and shut the kernel down (its dtfkit clusters and task zygote end with it)."""
        if self.ws is not None:
            self.ws.close()
            self.ws = None
        if self.kernel_id is not None:
            try:
                self.server("DELETE", f"/api/kernels/{self.kernel_id}")
            except requests.RequestException:
                pass
            self.kernel_id = None


def wait_for_class(go: threading.Barrier, failures: list[str]) -> bool:
    """Wait until every student of the class is ready to press "run" together (``go``); False, noted
    in ``failures``, when another student failed first and the class cannot start."""
    try:
        go.wait()
    except threading.BrokenBarrierError:
        failures.append("class did not start (another student failed first)")
        return False
    return True
