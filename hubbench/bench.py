"""The classroom bench: N students at once on a real JupyterHub, measured (runs in the bench's process, as root).

One class of N students goes like a lab: every student logs in, gets their server and opens the exercise
notebook; then everyone presses "run" within the same moment (a barrier) and runs chapter 1's first cells
(their first cluster) and exercise 1.1's check over the kernel's websocket; each saves the notebook; the hub
stops; nbgrader autogrades every student, one after another, as the grader account. Measured per student: time
from "run" to the first cluster ready and to the exercise checked, peak PSS, peak memory of their cgroup, CPU
seconds, failures by kind; per class: the machine's peak memory, the students' PSS summed at its highest,
port collisions, grading time.

:func:`run_sizes` runs classes of growing size (1, 2, 4, 8 ...) and stops, with the reason, at the first size
the machine does not hold: not enough memory to start it (from the last class's peak per student), a student's
processes killed by their memory cap or the machine running out, the first cluster slower than
``max_first_cluster``, or any other failure. It never crashes on a size it cannot hold.

Example (as root, on the hub machine)::

    result = run_class(students=2, zygote=True, wrong={2})
    print(table([result]))
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtfkit.i18n import N_, _, joined
from hubbench import users
from hubbench.browser import browser_session, missing as missing_browser, with_lesson
from hubbench.grading import Course, Grade
from hubbench.hub import Hub, checkout, open_for_students, restore_modes
from hubbench.limits import StudentGroup, available, group_folders
from hubbench.measure import Sampler, meminfo
from hubbench.student import Student, StudentError, wait_for_class
from hubbench.workload import (
    ASSIGNMENT,
    READY_MARK,
    WRONG_ANSWER,
    answered,
    assignment_source,
    chapter_path,
    check_outcome,
    lesson_cells,
    solution_of,
)

GIB = 2**30
PORT_ERRORS = ("Address already in use", "address already in use", "port-taken", "EADDRINUSE")


def _progress(message: str) -> None:
    print(f"[classroom-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class StudentResult:
    name: str
    wrong_answer: bool
    server_s: float | None = None  # log in to server ready (before "run")
    first_cluster_s: float | None = None  # "run" to the lesson's cluster answering
    checked_s: float | None = None  # "run" to exercise 1.1's check shown
    outcome: str = ""  # "passed", "failed" (the check's verdict) or "" (no verdict)
    check_text: str = ""
    isolated: bool | None = None
    addresses: dict[str, list[str]] = field(default_factory=dict)
    peak_pss: int = 0
    peak_threads: int = 0  # processes and threads at once: what the pids cap counts
    peak_cgroup: int = 0
    cpu_s: float = 0.0
    oom_kills: int = 0
    failures: list[str] = field(default_factory=list)
    grade: Grade | None = None
    notebook: str = ""  # where the saved notebook is (the student's home)


@dataclass
class ClassResult:
    students: int
    zygote: bool
    mem_limit: str
    rows: list[StudentResult] = field(default_factory=list)
    wall_s: float = 0.0
    machine_base: int = 0
    machine_peak: int = 0
    class_peak_pss: int = 0
    min_available: int = 0
    port_collisions: int = 0
    grading_s: float = 0.0
    leftovers: list[str] = field(default_factory=list)
    stopped: str = ""  # why this class counts as not held ("" when every student finished and was graded)

    def failures(self) -> Counter:
        return Counter(kind for row in self.rows for kind in row.failures)


# ------------------------------------------------------------------ one student's session
def _student_session(
    student: Student,
    row: StudentResult,
    notebook: dict[str, Any],
    lesson: list[str],
    go: threading.Barrier,
    cell_timeout: float,
) -> None:
    """Log in, get a server, open the notebook; wait for everyone; run the lesson and the exercise; save."""
    path = f"{ASSIGNMENT}.ipynb"
    try:
        t0 = time.monotonic()
        student.login()
        student.start_server()
        row.server_s = time.monotonic() - t0
        student.put_notebook(path, notebook)
        student.open_kernel(path)
    except (StudentError, OSError, ValueError) as err:
        row.failures.append("server: " + type(err).__name__)
        row.check_text = str(err)
        go.abort()  # the class cannot press "run" together without this student
        return
    except Exception as err:  # noqa: BLE001 (any failure is this student's, reported, not the bench's)
        row.failures.append("session: " + type(err).__name__)
        row.check_text = str(err)
        go.abort()
        return
    if not wait_for_class(go, row.failures):
        student.close()
        return
    pressed = time.monotonic()
    try:
        for code in lesson:
            run = student.execute(code, timeout=cell_timeout)
            if run.status != "ok":
                row.failures.append(
                    f"lesson cell {run.status}: " + (run.text.strip().splitlines() or ["?"])[-1][:120]
                )
                break
            for line in run.text.splitlines():
                if line.startswith("dtfkit-bench-cluster "):
                    probe = json.loads(line.split(" ", 1)[1])
                    row.isolated, row.addresses = probe["isolated"], probe["addresses"]
            if READY_MARK in run.text:
                row.first_cluster_s = run.finished - pressed
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            code = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            run = student.execute(code, timeout=cell_timeout)
            cell["outputs"] = run.outputs
            if run.status != "ok":
                row.failures.append(
                    f"exercise cell {run.status}: " + (run.text.strip().splitlines() or ["?"])[-1][:120]
                )
                break
            if "# check exercise" in code:
                row.checked_s = run.finished - pressed
                row.check_text = run.text.strip()
                row.outcome = check_outcome(run.text)
                expected = "failed" if row.wrong_answer else "passed"
                if row.outcome != expected:
                    row.failures.append(f"check said {row.outcome or 'nothing'}, expected {expected}")
        student.put_notebook(path, notebook)
        row.notebook = os.path.join(pwd.getpwnam(row.name).pw_dir, path)
    except Exception as err:  # noqa: BLE001
        row.failures.append("session: " + type(err).__name__ + ": " + str(err)[:120])
    finally:
        student.close()


def _port_collisions(rows: list[StudentResult]) -> int:
    """Port errors in any cell, plus addresses shared by two students whose clusters are not isolated."""
    collisions = sum(
        1 for row in rows for f in row.failures + [row.check_text] if any(e in f for e in PORT_ERRORS)
    )
    seen: dict[str, str] = {}
    for row in rows:
        if row.isolated:
            continue  # each isolated cluster has its own network: the same port in two of them never meets
        for address in (a for hosts in row.addresses.values() for a in hosts):
            if address in seen and seen[address] != row.name:
                collisions += 1
            seen[address] = row.name
    return collisions


# ------------------------------------------------------------------ one class
def run_class(
    students: int,
    *,
    zygote: bool = True,
    wrong: set[int] | None = None,
    mem_limit: str = "3G",
    max_pids: int = 4096,
    cell_timeout: float = 900.0,
    grade: bool = True,
    browser: bool = False,
    artifacts: str | None = None,
    lang: str | None = None,
) -> ClassResult:
    """One class of ``students`` (students numbered from 1; those in ``wrong`` answer 1.1 wrongly).

    ``lang`` ("zh_CN"): the class works in that edition of chapter 1 (``notebooks/zh_CN``), with
    ``DTFKIT_LANG`` set in every student's server, as a Chinese class's hub would.

    With ``browser``, student 1 works in a real JupyterLab page in headless Chromium (:mod:`.browser`), the
    others over the kernel's websocket; ``artifacts`` is where the page's screenshots go.
    """
    if students < 1:
        raise ValueError(f"a class has at least 1 student, not {students}")
    wrong = set(wrong or ())
    if not wrong <= set(range(1, students + 1)):
        raise ValueError(f"wrong={sorted(wrong)}: students are numbered 1..{students}")
    chapter = chapter_path(lang)  # before anything is created: an unknown edition is a clear error
    if browser and (why := missing_browser()) is not None:
        raise RuntimeError(f"a browser student cannot run here: {why}")
    result = ClassResult(students=students, zygote=zygote, mem_limit=mem_limit)
    remove_stale_groups()
    prefix = users.new_prefix()
    names: list[str] = []
    grader: list[str] = []
    course: Course | None = None
    password = secrets.token_urlsafe(16)
    t_class = time.monotonic()
    opened = open_for_students(
        [sys.executable, __file__], listed=(checkout(),)
    )  # the grader runs this Python too
    try:
        names = users.create(prefix, students)
        grader = users.create(prefix, 1, role="g")
        source = assignment_source(chapter)
        course = Course(grader[0], source)
        release = course.generate()
        right, wrong_answer = solution_of(source), WRONG_ANSWER
        lesson = lesson_cells(chapter)
        rows = [StudentResult(name, wrong_answer=(i + 1) in wrong) for i, name in enumerate(names)]
        result.rows = rows
        go = threading.Barrier(students, timeout=900)
        uids = {name: pwd.getpwnam(name).pw_uid for name in names}
        _progress(
            _("{students} student(s), task zygote {zygote}, memory cap {cap} each").format(
                students=students, zygote=_("on") if zygote else _("off"), cap=mem_limit
            )
        )
        with (
            Hub(names, password, mem_limit=mem_limit, max_pids=max_pids, zygote=zygote, lang=lang) as hub,
            Sampler(uids) as sampler,
        ):
            threads = []
            for row in rows:
                notebook = answered(release, wrong_answer if row.wrong_answer else right)
                if browser and row is rows[0]:
                    thread = threading.Thread(
                        target=browser_session,
                        args=(
                            hub.url,
                            row,
                            password,
                            with_lesson(notebook, lesson),
                            go,
                            cell_timeout,
                            Path(artifacts) if artifacts else None,
                        ),
                        name=f"student-{row.name}",
                    )
                else:
                    student = Student(hub.url, row.name, password)
                    thread = threading.Thread(
                        target=_student_session,
                        args=(student, row, notebook, lesson, go, cell_timeout),
                        name=f"student-{row.name}",
                    )
                thread.start()
                threads.append(thread)
            for thread in threads:
                thread.join(timeout=cell_timeout * (len(lesson) + 4))
                if thread.is_alive():
                    rows[threads.index(thread)].failures.append("session did not end")
            for row in rows:
                usage = StudentGroup(row.name, memory_bytes=None, max_pids=None).usage()
                row.peak_cgroup, row.cpu_s, row.oom_kills = (
                    usage.peak_bytes,
                    usage.cpu_seconds,
                    usage.oom_kills,
                )
                row.peak_pss = sampler.peak_pss[row.name]
                row.peak_threads = sampler.peak_threads[row.name]
                if usage.oom_kills:
                    row.failures.append("memory cap: processes killed")
                _progress(
                    _(
                        "{student}: server {server}, first cluster {first}, checked {checked} ({verdict}), "
                        "PSS {pss:.2f} GiB, CPU {cpu:.0f} s"
                    ).format(
                        student=row.name,
                        server=_fmt(row.server_s),
                        first=_fmt(row.first_cluster_s),
                        checked=_fmt(row.checked_s),
                        verdict=_(row.outcome) if row.outcome else _("no verdict"),
                        pss=row.peak_pss / GIB,
                        cpu=row.cpu_s,
                    )
                    + (
                        _(", FAILED: {failures}").format(failures="; ".join(row.failures))
                        if row.failures
                        else ""
                    )
                )
        result.leftovers += [
            f"port {port} still listening" for port in hub.listening()
        ]  # the hub's and proxy's
        result.machine_base, result.machine_peak = sampler.base_machine_used, sampler.peak_machine_used
        result.class_peak_pss, result.min_available = sampler.peak_class_pss, sampler.min_available
        result.port_collisions = _port_collisions(rows)
        if grade:
            t_grading = time.monotonic()
            for row in rows:
                if not row.notebook or not os.path.exists(row.notebook):
                    row.failures.append("no saved notebook to grade")
                    continue
                course.collect(row.name, row.notebook)
                row.grade = course.autograde(row.name)
                expected = 0.0 if row.wrong_answer else 1.0
                if row.grade.score != expected:
                    row.failures.append(
                        f"autograde gave {row.grade.score}, expected {expected}: {row.grade.error}"
                    )
                _progress(
                    _("{student}: autograded {score}/{max_score} in {seconds:.0f} s").format(
                        student=row.name,
                        score=row.grade.score,
                        max_score=row.grade.max_score,
                        seconds=row.grade.seconds,
                    )
                )
            result.grading_s = time.monotonic() - t_grading
    finally:
        restore_modes(opened)
        if course is not None:
            course.remove()
        users.remove(names + grader, prefix)
        result.leftovers += [f"user {n}" for n in names + grader if users.exists(n)]
        result.leftovers += [f"cgroup {g}" for g in group_folders(prefix)]
        result.wall_s = time.monotonic() - t_class
    result.stopped = _why_not_held(result)
    return result


def _why_not_held(result: ClassResult) -> str:
    failures = result.failures()
    total = meminfo()["MemTotal"]
    if any(row.oom_kills for row in result.rows) or result.min_available < 0.03 * total:
        return _("memory: {why}").format(
            why=_("a student's memory cap killed their processes")
            if any(row.oom_kills for row in result.rows)
            else _("the machine had {left:.1f} GiB left").format(left=result.min_available / GIB)
        )
    if any("timeout" in kind for kind in failures):
        return _("CPU: cells did not finish within the cell timeout")
    if failures:
        kind, count = failures.most_common(1)[0]
        return _("failures: {kind} ({count} student(s))").format(kind=kind, count=count)
    if result.port_collisions:
        return _("{count} port collision(s)").format(count=result.port_collisions)
    if result.leftovers:
        return _("left behind: {what}").format(what=joined(result.leftovers))
    return ""


# ------------------------------------------------------------------ growing classes
def run_sizes(
    sizes: list[int],
    *,
    zygote: bool = True,
    mem_limit: str = "3G",
    max_first_cluster: float = 300.0,
    wrong_every: int = 4,
    **kwargs: Any,
) -> tuple[list[ClassResult], str]:
    """Classes of each size in turn; returns the results and why it stopped ("" if every size held).

    Every ``wrong_every``-th student answers 1.1 wrongly (their grade must be 0, everyone else's 1).
    """
    results: list[ClassResult] = []
    per_student = 1.5 * GIB  # until a class has been measured: a 3-task lesson cluster plus its kernel
    for n in sorted(set(sizes)):
        available_now = meminfo()["MemAvailable"]
        need = n * per_student
        if need > 0.9 * available_now:
            return results, _(
                "memory: {n} students would need about {need:.1f} GiB ({each:.2f} GiB each, the last class's "
                "peak), {available:.1f} GiB is available"
            ).format(n=n, need=need / GIB, each=per_student / GIB, available=available_now / GIB)
        wrong = {i for i in range(1, n + 1) if wrong_every and i % wrong_every == 0}
        result = run_class(n, zygote=zygote, wrong=wrong, mem_limit=mem_limit, **kwargs)
        results.append(result)
        if result.stopped:
            return results, _("{n} students: {why}").format(n=n, why=result.stopped)
        slowest = max((r.first_cluster_s or 0.0) for r in result.rows)
        if slowest > max_first_cluster:
            return (
                results,
                _(
                    "start time: at {n} students a first cluster took {slowest:.0f} s (> {limit:.0f} s)"
                ).format(n=n, slowest=slowest, limit=max_first_cluster),
            )
        measured = max(r.peak_pss for r in result.rows)
        per_student = measured if len(results) == 1 else max(per_student, measured)
    return results, ""


# ------------------------------------------------------------------ the table
def _fmt(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.1f} s"


def _pcts(values: list[float]) -> str:
    if not values:
        return "—"
    values = sorted(values)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return f"{statistics.median(values):.1f} / {p95:.1f} / {values[-1]:.1f}"


# The table's columns, in the language dtfkit speaks (``plot.read_table`` reads either language back).
TABLE_COLUMNS = (
    N_("students"),
    N_("task zygote"),
    N_("server ready, s (p50 / max)"),
    N_("first cluster, s (p50 / p95 / max)"),
    N_("exercise checked, s (p50 / p95 / max)"),
    N_("autograde per student, s (p50 / max)"),
    N_("peak PSS per student, GiB (max)"),
    N_("class PSS peak, GiB"),
    N_("machine used, GiB (before → peak)"),
    N_("CPU s per student (mean)"),
    N_("threads per student (max)"),
    N_("failures"),
    N_("port collisions"),
)


def table(results: list[ClassResult]) -> str:
    """A markdown table, one row per class."""
    lines = [
        "| " + " | ".join(_(column) for column in TABLE_COLUMNS) + " |",
        "|" + "---|" * len(TABLE_COLUMNS),
    ]
    for r in results:
        firsts = [row.first_cluster_s for row in r.rows if row.first_cluster_s is not None]
        checks = [row.checked_s for row in r.rows if row.checked_s is not None]
        grades = sorted(row.grade.seconds for row in r.rows if row.grade)
        grading = f"{statistics.median(grades):.0f} / {grades[-1]:.0f}" if grades else "—"
        servers = sorted(row.server_s for row in r.rows if row.server_s is not None)
        server = f"{statistics.median(servers):.1f} / {servers[-1]:.1f}" if servers else "—"
        failures = ", ".join(f"{k} × {v}" for k, v in r.failures().items()) or "0"
        lines.append(
            f"| {r.students} | {_('on') if r.zygote else _('off')} | {server} | {_pcts(firsts)} | {_pcts(checks)} | {grading} "
            f"| {max(row.peak_pss for row in r.rows) / GIB:.2f} | {r.class_peak_pss / GIB:.2f} "
            f"| {r.machine_base / GIB:.1f} → {r.machine_peak / GIB:.1f} "
            f"| {statistics.mean(row.cpu_s for row in r.rows):.0f} | {max(row.peak_threads for row in r.rows)} "
            f"| {failures} | {r.port_collisions} |"
        )
    return "\n".join(lines)


def remove_stale_groups() -> list[str]:
    """Remove the cgroups of bench accounts that no longer exist (a run killed before its cleanup)."""
    removed = []
    for folder in group_folders(users.PREFIX):
        try:
            pwd.getpwnam(folder.name)
            continue  # the account exists: its run may still be going
        except KeyError:
            pass
        group = StudentGroup(folder.name, memory_bytes=None, max_pids=None)
        group.kill_all()
        for own in group.folders():
            if own.exists():
                own.rmdir()
                removed.append(str(own))
    return removed


def remove_leftovers() -> list[str]:
    """Remove the bench accounts (and their processes, homes and groups) an interrupted run left behind."""
    left = users.leftovers()
    for name in left:
        users.remove([name], prefix=name[: len(users.PREFIX) + 4])
    remove_stale_groups()
    return left


def preflight() -> list[str]:
    """What stops the bench from running here (empty when it can run)."""
    problems = []
    left = users.leftovers() if os.geteuid() == 0 else []
    if left:
        problems.append(
            f"accounts left by an interrupted bench run: {', '.join(left)}; "
            "remove them with: python -m dtfkit classroom-bench --remove-leftovers"
        )
    if os.geteuid() != 0:
        problems.append("run it as root: it creates one system user per student and starts a hub as root")
    ok, why = available()
    if not ok:
        problems.append(f"no per-student memory caps: {why}")
    from hubbench.hub import missing_tools, proxy_command

    try:
        proxy_command()
    except RuntimeError as err:
        problems.append(str(err))
    problems += missing_tools()
    for module in ("jupyterhub", "nbgrader"):
        try:
            __import__(module)
        except ImportError:
            problems.append(f"the Python package {module!r} is missing: pip install 'dtfkit[hub]'")
    return problems


# ------------------------------------------------------------------ sizing a bigger class
def sizing(
    results: list[ClassResult], class_sizes: tuple[int, ...] = (30, 100), burst_s: float = 120.0
) -> str:
    """Cores and GiB for bigger classes, from the largest class that held (a formula over measured figures).

    Memory: the class's peak PSS per student (the highest student) times the class, plus the machine's own
    use before the class. Cores: every student's CPU seconds for the lab (server, lesson, check) spent within
    ``burst_s`` seconds of everyone pressing "run" — the burst a lab makes; spread over longer, fewer cores do.
    """
    held = [r for r in results if not r.stopped]
    if not held:
        return _("no class held here: nothing to size from")
    r = max(held, key=lambda c: c.students)
    per_student = max(row.peak_pss for row in r.rows)
    cpu = statistics.mean(row.cpu_s for row in r.rows)
    lines = [
        _(
            "From the class of {students} (task zygote {zygote}): {pss:.2f} GiB PSS per student at the peak, "
            "{cpu:.1f} CPU s per student, the machine using {before:.1f} GiB before."
        ).format(
            students=r.students,
            zygote=_("on") if r.zygote else _("off"),
            pss=per_student / GIB,
            cpu=cpu,
            before=r.machine_base / GIB,
        ),
        "",
        "| "
        + " | ".join(
            [
                _("students"),
                _("memory, GiB (students × {pss:.2f} + {before:.1f})").format(
                    pss=per_student / GIB, before=r.machine_base / GIB
                ),
                _(
                    "cores for the lab's burst within {burst:.0f} s (students × {cpu:.1f} CPU s / {burst:.0f} s, rounded up)"
                ).format(burst=burst_s, cpu=cpu),
            ]
        )
        + " |",
        "|---|---|---|",
    ]
    for n in class_sizes:
        memory = n * per_student / GIB + r.machine_base / GIB
        cores = n * cpu / burst_s
        lines.append(f"| {n} | {memory:.0f} | {max(1, round(cores + 0.499))} |")
    return "\n".join(lines)
