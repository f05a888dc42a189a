"""The program every task process runs (``python -m dtfkit.engine.task.task_main``).

Order matters: connect to the owner (over a Unix socket, no thread started),
wait for the namespace anchor if it is still starting, join the cluster's network
namespace while still single-threaded (with emulated links: make one of its own in
the cluster's user namespace, which the anchor connects to its hub once the channel
is up), reserve a port, import TensorFlow while the owner gathers everyone's ports,
then start the server from the ClusterSpec the owner sends back.
"""

# ruff: noqa: E402
# (imports below the first line: it takes the time Python came up, before the imports it times)
from __future__ import annotations

import contextlib
import time

# (step, time.monotonic(), time.process_time()) at the end of each start-up step: Python is up, this module starts
_PHASES: list[tuple[str, float, float]] = [("interpreter", time.monotonic(), time.process_time())]

import gc
import io
import os
import pickle
import queue
import signal
import socket
import sys
import threading
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any, TypeVar

from dtfkit.engine.platform import lifeline
from dtfkit.engine.wire import dumps, frames, protocol, sources
from dtfkit.engine.wire.protocol import TaskConfig

_PHASES.append(("dtfkit imports", time.monotonic(), time.process_time()))


M = TypeVar("M")  # a message type of dtfkit.engine.wire.protocol


def _phase(name: str) -> None:
    """Mark the end of a start-up step (sent to the owner with Ready)."""
    _PHASES.append((name, time.monotonic(), time.process_time()))


class Channel:
    """The task's end of the control connection to its owner."""

    def __init__(self, conn: Connection) -> None:
        # Connected and greeted already (connect()), before joining the namespace.
        self.inbox: queue.Queue[object] = queue.Queue()  # the owner's messages but interrupts and dumps
        self.send_lock = threading.Lock()
        self.current_call: int | None = None
        self.cancelled: set[int] = set()
        self.conn = conn
        threading.Thread(target=self._watch, name="dtfkit-control", daemon=True).start()

    def send(self, message: object) -> None:
        with self.send_lock:
            self.conn.send(message)

    def _watch(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                # The owner closed the cluster or died (even by SIGKILL): end this
                # task and anything it started, at once.
                lifeline.end_own_process_group()
            if isinstance(message, protocol.Interrupt):
                self.cancelled.add(message.call_id)
                if self.current_call == message.call_id:
                    threading.Thread(
                        target=self._keep_interrupting,
                        args=(message.call_id,),
                        name="dtfkit-interrupt",
                        daemon=True,
                    ).start()
            elif isinstance(message, protocol.DumpStacks):
                self.send(protocol.Stacks(message.call_id, _format_stacks()))
            else:
                self.inbox.put(message)

    def _keep_interrupting(self, call_id: int, bound: float = 30.0) -> None:
        """SIGINT the main thread until the call ends.

        A real signal aimed at the main thread also breaks a blocking sleep or wait,
        where _thread.interrupt_main() would not. But a signal that lands just before
        the main thread blocks in a lock is handled too late to wake it (the handler
        only sets a flag), so one signal is not enough: repeat until the call is over.
        """
        pace = threading.Event()
        deadline = time.monotonic() + bound
        main = threading.main_thread().ident
        assert main is not None  # the main thread runs: it started this one
        while self.current_call == call_id and time.monotonic() < deadline:
            signal.pthread_kill(main, signal.SIGINT)
            pace.wait(0.2)

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        # Only a running call is interrupted: a late repeat must not break the reply
        # being sent, or the loop waiting for the next call.
        if self.current_call is not None:
            raise KeyboardInterrupt

    def wait_for(self, kind: type[M]) -> M:
        message = self.inbox.get()
        if not isinstance(message, kind):
            raise RuntimeError(f"expected {kind.__name__} from the owner, got {type(message).__name__}")
        return message


def connect(cfg: TaskConfig) -> Connection:
    """Connect to the owner and say hello (a cold task); the connection, not yet watched.

    Starts no thread, so a cold task does it before it joins the namespace: a Unix
    socket is reached through the file system whatever the network namespace, and
    the handshake's round trips then overlap the wait for the anchor.
    """
    from multiprocessing.connection import Client

    conn = Client(cfg.control, authkey=bytes.fromhex(cfg.authkey))
    conn.send(protocol.Hello(cfg.task, cfg.gen, os.getpid()))
    return conn


def _format_stacks() -> str:
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in frames.items():
        if names.get(ident) == "dtfkit-control":
            continue
        stack = sources.format_stack(frame)
        parts.append(f"Thread {names.get(ident, ident)}:\n{stack}")
    return "\n".join(parts)


def _plain(value: Any) -> Any:  # what the learner's function returned: TensorFlow's tensors too
    """Turn tensors into NumPy so the notebook can unpickle results without TensorFlow."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return value.numpy()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_plain(v) for v in value)
    return value


class _ImportsTensorFlow(Exception):
    pass


class _TensorFlowProbe(pickle.Unpickler):
    """Unpickles a result here, refusing classes the notebook could only load with TensorFlow."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] in ("tensorflow", "keras", "tf_keras"):
            raise _ImportsTensorFlow(module)
        return super().find_class(module, name)


def _encode_result(value: object) -> bytes:
    import cloudpickle

    data: bytes = cloudpickle.dumps(_plain(value))
    # The byte test is a cheap pre-filter: a plain string may mention "tensorflow".
    if b"tensorflow" in data or b"keras" in data:
        try:
            _TensorFlowProbe(io.BytesIO(data)).load()
        except _ImportsTensorFlow:
            raise TypeError(
                f"the function returned a TensorFlow object ({type(value).__name__}); "
                "return plain Python or NumPy values instead (for example tensor.numpy())"
            ) from None
    return data


def _run_call(channel: Channel, call: protocol.Call) -> None:
    import cloudpickle

    from dtfkit import taskapi

    call_id = call.call_id
    try:
        try:
            channel.current_call = call_id
            if taskapi.STATE.context is not None:
                taskapi.STATE.context.call_id = call_id
            if call_id in channel.cancelled:
                raise KeyboardInterrupt("interrupted before it started")
            sources.register(call.sources)  # before unpickling: a class body may raise too
            fn, args, kwargs = cloudpickle.loads(call.payload)
            value = fn(*args, **kwargs)
        finally:
            channel.current_call = None
        result = _encode_result(value)
        _mark_output_done(call_id)
        channel.send(protocol.Result(call_id, result))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the owner
        _mark_output_done(call_id)
        # The message too: TensorFlow's graph errors carry the traceback where the failing op was defined.
        message = frames.shorten_paths(str(exc))
        channel.send(protocol.Error(call_id, type(exc).__name__, message, sources.format_exc()))


def _mark_output_done(call_id: int) -> None:
    """Tell the owner, in the output stream itself, that this call's output is complete."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a replaced or closed stream
            stream.flush()
    os.write(1, protocol.output_done_line(call_id))


def _reserve_port(port: int) -> socket.socket:
    """Bind ``port`` (0: any free one) and hold it until the server takes it over.

    A restarted task asks for its old port, which may still be in TIME_WAIT.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("", port))
    return sock


def _import_tensorflow() -> Any:  # the tensorflow module: it ships no types
    """Import TensorFlow with Python's cyclic garbage collector paused, then freeze what it made.

    The import makes about half a million objects that live as long as the task. With the
    collector on, they are walked again and again while they pile up, and once more when the
    young generation holding them is next collected: 0.15 to 0.4 CPU-s of a 2 s import, by where
    the collections happen to fall (benchmarks/RESULTS.md). ``gc.freeze()`` moves them to the
    permanent generation, so no later collection walks them either; what little cyclic garbage the
    import left stays with them (about 2 MiB).
    """
    gc.disable()
    try:
        import tensorflow as tf

        gc.freeze()
    finally:
        gc.enable()
    return tf


def _serve(
    tf: Any, cluster: dict[str, list[str]], task_job: str, task_index: int, port: int | None = None
) -> Any:
    """Start this task's server; ``port``: bind it instead of the cluster's port for this
    task (a relay holds that one, see ``dtfkit.engine.task.relay``)."""
    spec = tf.train.ClusterSpec(cluster)
    if port is None:
        return tf.distribute.Server(spec, job_name=task_job, task_index=task_index, start=True)
    server_def = tf.train.ServerDef(
        cluster=spec.as_cluster_def(), job_name=task_job, task_index=task_index, protocol="grpc", port=port
    )
    return tf.distribute.Server(server_def, start=True)


def _start_relay(cfg: TaskConfig, cluster: dict[str, list[str]], reserved: socket.socket) -> int | None:
    """With ``delay=``: hand the task's port to a delaying relay; the port the server binds then."""
    delays = (cfg.launch.get("link") or {}).get("delays")
    if delays is None:
        return None
    from dtfkit.engine.task import relay

    own, peers = relay.peer_delays(cluster, f"{cfg.job}:{cfg.index}", delays)
    server_port, _ = relay.start(reserved, own, peers)  # it ends with this process
    return server_port


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _exit_code(exc: SystemExit) -> int:
    """The exit code an interpreter ending on ``exc`` gives (a message in it is printed first)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _run_script(cfg: TaskConfig, cluster: dict[str, list[str]], job: str, index: int) -> int:
    import runpy

    from dtfkit.engine.wire.layout import TaskId, tutorial_flags

    script = cfg.script
    assert script is not None  # mode "script": the launch names one
    sys.argv = [script, *tutorial_flags(cluster, TaskId(job, index)), *cfg.script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException:  # noqa: BLE001 - report any crash as a failed task
        sys.stderr.write(sources.format_exc())
        return 1
    return 0


def _start_cold(cfg: TaskConfig, conn: Connection) -> tuple[Channel, socket.socket | None, Any]:
    """Watch the connection, reserve a port (reported at once), import TensorFlow."""
    mode = cfg.mode
    channel = Channel(conn)
    signal.signal(signal.SIGINT, channel.on_sigint)

    from dtfkit import taskapi

    # taskapi annotates send as None only (dtfkit/taskapi.py: `self.send = None`); it is a callable once set.
    taskapi.STATE.send = lambda event: channel.send(protocol.Metric(event))
    link = cfg.launch.get("link")
    if link:
        from dtfkit.engine.platform import netns

        try:
            netns.request_link(link["socket"], link["address"], link["rate"])
        except BaseException:  # noqa: BLE001
            channel.send(protocol.StartFailed("link", sources.format_exc()))
            os._exit(3)
    reserved = None
    if mode != "client":
        try:
            reserved = _reserve_port(cfg.port or 0)
        except OSError:
            channel.send(protocol.StartFailed("bind", sources.format_exc()))
            os._exit(3)
        channel.send(protocol.Port(reserved.getsockname()[1]))
        _phase("port reserved")

    tf = None
    if mode != "script" and cfg.tensorflow:
        try:
            tf = _import_tensorflow()
        except BaseException:  # noqa: BLE001
            channel.send(protocol.StartFailed("import", sources.format_exc()))
            os._exit(3)
        _phase("tensorflow imported")
    return channel, reserved, tf


def _whole_lines_out() -> None:
    """Write every line of stdout and stderr in one piece.

    Both streams share one pipe. Unbuffered (``-u``), print() writes its text and its
    newline separately, and a thread's traceback on stderr can land between them,
    garbling the line. Line-buffered, a whole line goes out in one write, which a pipe
    keeps in one piece (up to 4 KiB).
    """
    for stream in (sys.stdout, sys.stderr):
        assert isinstance(stream, io.TextIOWrapper)  # the interpreter's own streams, in a task
        stream.reconfigure(line_buffering=True, write_through=False)


def main() -> None:
    _whole_lines_out()
    cfg = TaskConfig.from_json(os.environ[protocol.CONFIG_ENV])
    lifeline.die_with_parent()
    dumps.arm(cfg.stacks_file)
    sources.install_excepthooks()  # uncaught exceptions (a thread's too) print without the machine's paths
    frames.shorten_tensorflow_call_locations()  # and TensorFlow's deprecation warnings name no machine's file
    signal.signal(signal.SIGINT, signal.default_int_handler)  # until the channel is up
    netns_pid, ready_fd = cfg.launch.get("netns_pid"), cfg.launch.get("netns_ready_fd")
    if ready_fd is not None:
        from dtfkit.engine.platform import netns

        # Spawned while the anchor still starts: wait until it made the namespace, and
        # leave without a word (not even a Hello) if it failed: the launcher starts
        # this task again elsewhere.
        if not netns.wait_ready(ready_fd):
            os._exit(netns.NO_NAMESPACE_EXIT)
    conn = connect(cfg)
    _phase("connected")
    if netns_pid:
        from dtfkit.engine.platform import netns

        if cfg.launch.get("link"):  # its own namespace, linked to the anchor's hub once the channel is up
            netns.enter_own(netns_pid)
        else:
            netns.enter(netns_pid)
    channel, reserved, tf = _start_cold(cfg, conn)
    job, index = cfg.job, cfg.index
    mode = cfg.mode  # "serve", "noserve", "script" or "client"

    cluster, tf_config, setup, setup_sources = channel.wait_for(protocol.Spec)
    _phase("ClusterSpec received")
    if tf_config:
        os.environ["TF_CONFIG"] = tf_config
    if setup is not None:
        try:
            import cloudpickle

            sources.register(setup_sources)
            fn, args, kwargs = cloudpickle.loads(setup)
            fn(*args, **kwargs)
        except BaseException:  # noqa: BLE001
            channel.send(protocol.StartFailed("setup", sources.format_exc()))
            os._exit(3)
    server = None
    server_port = None
    if reserved is not None and mode == "serve":
        try:
            server_port = _start_relay(cfg, cluster, reserved)
        except BaseException:  # noqa: BLE001
            channel.send(protocol.StartFailed("link", sources.format_exc()))
            os._exit(3)
    if reserved is not None:
        reserved.close()
    if mode == "serve" and tf is not None:
        try:
            server = _serve(tf, cluster, job, index, server_port)
        except BaseException:  # noqa: BLE001
            channel.send(protocol.StartFailed("bind", sources.format_exc()))
            os._exit(3)
    if server is not None:
        _phase("server up")
    target = _text(server.target) if server is not None else None
    from dtfkit import taskapi

    taskapi.STATE.context = taskapi.TaskContext(job, index, cluster, target, server)
    _mark_output_done(protocol.STARTUP_OUTPUT_ID)
    _phase("ready sent")
    channel.send(protocol.Ready(target, os.getpid(), tuple(_PHASES)))

    if mode == "script":
        code = _run_script(cfg, cluster, job, index)
        sys.stdout.flush()
        sys.stderr.flush()
        if cfg.linger and job != "ps":
            # Stay, and keep serving, until the launcher ends the cluster: a tutorial-style
            # peer without device_filters needs every task's server up until it is done
            # itself, and would otherwise wait for this one for ever. The mark comes
            # after every line the script printed.
            os.write(1, protocol.script_done_line(code))
            threading.Event().wait()  # the launcher kills us; EOF on the channel ends us too
        # TensorFlow leaves non-daemon threads behind; a normal interpreter exit can
        # wait on them for minutes. The script is done: leave now.
        os._exit(code)

    while True:
        message = channel.inbox.get()
        if isinstance(message, protocol.Call):
            _run_call(channel, message)
        elif isinstance(message, protocol.Exit):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


if __name__ == "__main__":
    main()
