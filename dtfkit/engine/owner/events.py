"""What the tasks of one cluster say, as events on one queue: ``Events``.

The control listener accepts each task's connection (authenticated in a thread of its
own), reader threads turn what a task sends and prints into ``Event`` s, and the one
thread that waits on the cluster (``waiting()``) applies them with ``pump()`` or, for
a whole wait, ``wait_until(done, deadline)``. Answers to a call are routed to that
call (``calls.RunHandle``, registered with ``open_call``) by call id. ``Events`` knows each
task's current process (``watch``), so it needs nothing from the ``tasks.Tasks`` that starts them.

Example::

    >>> with events.waiting("my call"):                                          # doctest: +SKIP
    ...     ok = events.wait_until(lambda: not pending, time.monotonic() + 5)
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from typing import Any, Protocol

from dtfkit.engine.launchers.contract import ControlConnection
from dtfkit.engine.owner.metrics import MetricLog
from dtfkit.engine.owner.output import Output
from dtfkit.engine.owner.process import TaskProcess
from dtfkit.engine.wire import control, protocol
from dtfkit.engine.wire.layout import TaskId
from dtfkit.errors import DtfkitError

# How long an exited task's exit event waits for its control connection to be read to the end.
CONNECTION_DRAIN_SECONDS = 2.0

# A deadline for wait_until: a time.monotonic() value, None (no bound), or a function
# that says it anew before each wait (a deadline that moves while waiting).
Deadline = float | None | Callable[[], float | None]
Done = Callable[[], bool]  # wait_until's test, asked before each wait


class EventKind(str, enum.Enum):
    """What an ``Event`` says happened (a ``str``: ``EventKind.LOG == "log"``)."""

    HELLO = "hello"  # the task's control connection is up (payload: the connection)
    MSG = "msg"  # it sent a protocol message (payload: the message)
    EXIT = "exit"  # its process ended (payload: the exit code)
    LOG = "log"  # a line it printed, for the waiting thread to echo (payload: the line; seq: its number)


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to a task, in the order the owner learnt of it."""

    kind: EventKind
    task: str
    gen: int = 0  # the generation of the task's process that it happened to (a log line: 0, it has none)
    payload: Any = None  # see EventKind
    seq: int = 0  # a log line's number in the log book (LOG only)


OnEvent = Callable[[Event], None]  # called by wait_until after each event it applied


class CallInbox(Protocol):
    """Where ``Events`` routes a call's answers (``calls.RunHandle`` is one)."""

    def deliver(self, task: TaskId, message: CallAnswer) -> None:
        """Take one answer of ``task`` to the call."""


CallAnswer = protocol.Result | protocol.Error | protocol.OutputDone | protocol.Stacks


class Events:
    """The control transport, the event queue, and the one thread that waits on it."""

    def __init__(self, cluster_id: str, output: Output, metrics: MetricLog, is_closed: Callable[[], bool]):
        self.cluster_id = cluster_id
        self.output = output
        self.metrics = metrics
        self.queue: queue.Queue[Event] = queue.Queue()
        self._is_closed = is_closed
        self._current: dict[str, TaskProcess] = {}  # each task's newest process (watch())
        self._calls: dict[int, CallInbox] = {}
        self._call_ids = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self._conns: list[ControlConnection] = []
        self._wait_lock = threading.RLock()  # see waiting()
        # Per (task, generation): set once its control connection is read to the end. A task's exit
        # event waits for it, so that what the task sent before it exited (a StartFailed, say) is
        # queued first: the two come through different threads (see _read_output).
        self._connection_read: dict[tuple[str, int], threading.Event] = {}
        self._handshakes = 0  # connections accepted whose Hello is not read yet
        self._connections_lock = threading.Condition()
        self._wait_holder: tuple[str, str] | None = None
        self._listener: Listener | None = None
        self._address = ""
        self._authkey = b""

    # -------------------------------------------------------------- transport
    def listen(self, address: str, authkey: bytes) -> None:
        """Accept the tasks' connections on ``address`` (each one authenticated with ``authkey``)."""
        self._address, self._authkey = address, authkey
        # No authkey here: the handshake runs in each connection's own thread (see
        # _read_messages), so one stalled task cannot hold up the others' connections.
        self._listener = Listener(address)

    def start_accepting(self) -> None:
        self.spawn_thread(self._accept_loop, "dtfkit-accept")

    def watch(self, proc: TaskProcess) -> None:
        """Read what a newly started process prints (and sends, if it came connected); from now on
        it is its task's current process: events of the task's older processes are dropped."""
        task, gen, conn = proc.task, proc.gen, proc.handle.connection
        self._current[task.name] = proc
        if conn is not None:  # adopted: connected and greeted already
            self._conns.append(conn)
            self.queue.put(Event(EventKind.HELLO, task.name, gen, conn))
            read = self._reading(task.name, gen)
            self.spawn_thread(
                lambda: self._read_connection(conn, task.name, gen, read), f"dtfkit-conn-{task.name}"
            )
        self.spawn_thread(lambda: self._read_output(proc), f"dtfkit-log-{task.name}")

    def forget(self, proc: TaskProcess) -> None:
        """``proc``'s task is no longer the cluster's (a client after its call): drop its events."""
        if self._current.get(proc.task.name) is proc:
            del self._current[proc.task.name]

    def spawn_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _accept_loop(self) -> None:
        assert self._listener is not None  # listen() comes first
        control.serve(self._listener, self._is_closed, self._read_messages, "dtfkit-conn")

    def _read_messages(self, conn: Connection) -> None:
        self._conns.append(conn)  # close() shuts it down, a stalled handshake's included
        with self._connections_lock:
            self._handshakes += 1
        read = hello = None
        try:
            hello = control.first_message(conn, self._authkey, protocol.Hello)
            if hello is not None:
                read = self._reading(hello.task, hello.gen)
                self.queue.put(Event(EventKind.HELLO, hello.task, hello.gen, conn))
        finally:
            with self._connections_lock:
                self._handshakes -= 1
                self._connections_lock.notify_all()
        if hello is not None and read is not None:
            self._read_connection(conn, hello.task, hello.gen, read)

    def _reading(self, name: str, gen: int) -> threading.Event:
        """Note that the control connection of task ``name``'s generation ``gen`` is being read."""
        read = threading.Event()
        with self._connections_lock:
            self._connection_read[(name, gen)] = read
        return read

    def _read_connection(self, conn: ControlConnection, name: str, gen: int, read: threading.Event) -> None:
        """Turn what one task sends into events (the connection is authenticated already)."""
        try:
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return
                if isinstance(message, protocol.Metric):
                    self.metrics.add(name, message.row)
                else:
                    self.queue.put(Event(EventKind.MSG, name, gen, message))
        finally:
            read.set()

    def _await_connection_read(self, name: str, gen: int, bound: float = CONNECTION_DRAIN_SECONDS) -> None:
        """Wait (at most ``bound`` s) until the control connection of an exited task is read to
        its end: once its process is gone, the end comes at once. A task that connected but whose
        handshake is still in progress is waited for too; one that never connected is not."""
        deadline = time.monotonic() + bound
        with self._connections_lock:
            self._connections_lock.wait_for(
                lambda: (name, gen) in self._connection_read or self._handshakes == 0,
                timeout=bound,
            )
            read = self._connection_read.pop((name, gen), None)
        if read is not None:
            read.wait(max(0.0, deadline - time.monotonic()))

    def _read_output(self, proc: TaskProcess) -> None:
        name = proc.task.name
        logbook = self.output.logbook
        with contextlib.suppress(OSError):  # the task's first line meets the same trouble, handled there
            logbook.start_file(name)
        while True:
            try:
                raw = proc.handle.read_line()
            except (OSError, ValueError):  # the stream was closed under us
                break
            if not raw:
                break
            try:
                self._take_line(proc, raw.decode("utf-8", errors="replace").rstrip("\n"))
            except Exception as exc:  # noqa: BLE001 - one odd line must not end the reader
                logbook.add(name, f"[dtfkit: could not take a line of output: {exc!r}]")
        proc.output_ended()
        proc.handle.close_output()
        code = proc.handle.wait()
        # Its last messages first: a StartFailed("bind") queued after the exit would read as a
        # plain "exited with code 3" instead of the port taken (seen in CI).
        self._await_connection_read(name, proc.gen)
        self.queue.put(Event(EventKind.EXIT, name, proc.gen, code))

    def _take_line(self, proc: TaskProcess, text: str) -> None:
        name = proc.task.name
        done = protocol.parse_done_mark(text)
        if done is not None:
            before, kind, number = done
            if before:  # the call's last output had no newline
                self.output.logbook.add(name, before)
            self.queue.put(Event(EventKind.MSG, name, proc.gen, protocol.done_message(kind, number)))
            return
        # Progress bars redraw with carriage returns: keep the last state.
        self.output.logbook.add(name, text.split("\r")[-1] if "\r" in text else text)

    def post_line(self, seq: int, task: str, line: str) -> None:
        """Queue a log line for the waiting thread to echo (``Output.live_output``'s ``notify``)."""
        self.queue.put(Event(EventKind.LOG, task, payload=line, seq=seq))

    def close(self) -> None:
        """Stop listening, end every reader thread (a stalled handshake's included)."""
        if self._listener is not None:
            control.stop_listening(self._listener, self._address)
        for conn in self._conns:
            try:
                # shutdown() wakes a thread blocked reading the socket; close() would not.
                with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    # --------------------------------------------------------------- applying
    def pump(self, deadline: float | None) -> Event | None:
        """Wait for the next event until ``deadline`` (``time.monotonic()``; None: no bound),
        apply it, and return it; None once the deadline passed. Call it inside ``waiting()``."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            event = self.queue.get(timeout=timeout)
        except queue.Empty:
            return None
        self.apply_event(event)
        return event

    def drain(self) -> None:
        """Apply every event already queued, without waiting."""
        while True:
            try:
                event = self.queue.get_nowait()
            except queue.Empty:
                return
            self.apply_event(event)

    def wait_until(self, done: Done, deadline: Deadline, on_event: OnEvent | None = None) -> bool:
        """Apply events until ``done()`` (then True) or until ``deadline`` passes (then False).

        ``done()`` is asked before each wait; ``on_event(event)`` is called after each event
        is applied (it may raise to end the wait). ``deadline``: see ``Deadline``. The one
        wait loop of the engine and its front ends; call it inside ``waiting()``.

        Example::

            >>> with events.waiting("the answers"):                                   # doctest: +SKIP
            ...     if not events.wait_until(lambda: len(answered) == 2, time.monotonic() + 5):
            ...         raise TimeoutError("no answer within 5 s")
        """
        while not done():
            event = self.pump(deadline() if callable(deadline) else deadline)
            if event is None:
                return False
            if on_event is not None:
                on_event(event)
        return True

    def apply_event(self, event: Event) -> TaskProcess | None:
        """Apply an event to the task it concerns; returns that task (current generation only)."""
        if event.kind is EventKind.LOG:
            self.output.echo_line(event.seq, event.task, event.payload)
            return None
        proc = self.current(event)
        if proc is None:
            return None
        if event.kind is EventKind.HELLO:
            proc.connected(event.payload)
        elif event.kind is EventKind.MSG:
            self.apply_message(proc, event.payload)
        return proc

    def current(self, event: Event) -> TaskProcess | None:
        """The task an event concerns, if it is from the task's current generation."""
        if event.kind is EventKind.LOG:
            return None
        proc = self._current.get(event.task)
        return proc if proc is not None and proc.gen == event.gen else None

    def apply_message(self, proc: TaskProcess, message: tuple[object, ...]) -> None:
        """What a protocol message from ``proc`` changes: its state (through its methods), or a call's answers."""
        if isinstance(message, protocol.Port):
            proc.port_bound(message.port)
        elif isinstance(message, protocol.Ready):
            proc.said_ready(message.phases)
        elif isinstance(message, protocol.OutputDone) and message.call_id == protocol.STARTUP_OUTPUT_ID:
            proc.startup_output_in()
        elif isinstance(message, (protocol.Result, protocol.Error, protocol.OutputDone, protocol.Stacks)):
            call = self._calls.get(message.call_id)
            if call is not None:  # else a call given up on: its late answer is dropped
                call.deliver(proc.task, message)
        elif isinstance(message, protocol.ScriptDone):
            proc.script_done(message.code)
        elif isinstance(message, protocol.StartFailed):
            proc.start_failed(message.stage, message.traceback)

    # ------------------------------------------------------------------ calls
    def open_call(self, inbox: CallInbox) -> int:
        """A new call's id; answers that carry it are routed to ``inbox`` until ``close_call(id)``."""
        call_id = next(self._call_ids)
        self._calls[call_id] = inbox
        return call_id

    def close_call(self, call_id: int) -> None:
        """Stop routing answers to the call: a late one is dropped."""
        self._calls.pop(call_id, None)

    # ---------------------------------------------------------------- waiting
    @property
    def waiting_for(self) -> str | None:
        """What the thread that waits on this cluster now waits for (None: nobody waits)."""
        holder = self._wait_holder
        return None if holder is None else holder[1]

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Claim the cluster's event queue for this thread while it waits for ``what``.

        One thread at a time: two threads waiting on the one queue would take each
        other's events, and one of them would wait for ever. A second thread is refused.
        """
        if not self._wait_lock.acquire(blocking=False):
            holder = self._wait_holder
            raise DtfkitError(
                f"cluster {self.cluster_id} is already waiting for {holder[1] if holder else 'something'} in "
                f"thread {holder[0] if holder else '?'!r}; dtfkit waits for one thing at a time per "
                f"cluster, so {what} cannot wait in thread {threading.current_thread().name!r} too. "
                "Next step: wait from the thread that is already waiting (handle.result()), one call "
                "after another, or start a separate cluster for this thread."
            )
        outer = self._wait_holder
        self._wait_holder = (threading.current_thread().name, what)
        try:
            yield
        finally:
            self._wait_holder = outer
            self._wait_lock.release()
