"""Grading the class with nbgrader (runs in the bench's process; nbgrader runs as the grader's own account).

:class:`Course` is an nbgrader course folder owned by an unprivileged grader account: ``generate_assignment``
writes the release the students get; :meth:`Course.collect` copies each student's saved notebook out of their
home (as root, the way a teacher's collection script would); :meth:`Course.autograde` runs ``nbgrader autograde``
for one student at a time, as the grader, never as root (a submission is code, run by whoever grades it), and
returns the score nbgrader recorded and how long it took.

Example::

    course = Course(grader="dtfk1a2bg1", source=assignment_source())
    release = course.generate()
    course.collect("dtfk1a2bs1", "/home/dtfk1a2bs1/class01.ipynb")
    course.autograde("dtfk1a2bs1")        # Grade(student=..., score=1.0, max_score=1.0, seconds=41.2, ...)
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hubbench.hub import tool_path
from hubbench.workload import ASSIGNMENT


@dataclass
class Grade:
    student: str
    score: float | None  # None: nbgrader did not grade it (see error)
    max_score: float | None
    seconds: float
    error: str = ""
    feedback: str = ""  # what the check cell showed in the autograded notebook


class Course:
    """An nbgrader course folder run by the grader account (see the module's docstring)."""

    def __init__(self, grader: str, source: dict[str, Any], timeout: float = 900.0) -> None:
        self.grader = grader
        account = pwd.getpwnam(grader)
        self.uid, self.gid, self.home = account.pw_uid, account.pw_gid, account.pw_dir
        self.root = Path(tempfile.mkdtemp(prefix="dtfkit-course-"))
        self.timeout = timeout
        (self.root / "nbgrader_config.py").write_text(
            "c = get_config()\n"
            f"c.CourseDirectory.root = {str(self.root)!r}\n"
            "c.CourseDirectory.course_id = 'dtfkit-class'\n"
            "c.Execute.timeout = 600  # seconds per cell: a class graded on a busy machine\n"
        )
        folder = self.root / "source" / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(source, indent=1))
        self._chown(self.root)

    def _chown(self, path: Path) -> None:
        for folder, _dirs, files in os.walk(path):
            os.chown(folder, self.uid, self.gid)
            for name in files:
                os.chown(os.path.join(folder, name), self.uid, self.gid)

    def nbgrader(self, *args: str) -> subprocess.CompletedProcess:
        """``nbgrader ARGS`` as the grader, in the course folder, bounded by the course's timeout."""
        env = {
            "PATH": tool_path(),  # nbgrader runs alembic, a command of this interpreter's environment
            "HOME": self.home,
            "USER": self.grader,
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        }
        return subprocess.run(
            ["runuser", "-u", self.grader, "--", sys.executable, "-m", "nbgrader", *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=self.timeout,
        )

    def generate(self) -> dict[str, Any]:
        """``nbgrader generate_assignment``; returns the release notebook (what the students get)."""
        done = self.nbgrader("generate_assignment", ASSIGNMENT, "--force")
        release = self.root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        if done.returncode != 0 or not release.exists():
            raise RuntimeError(
                f"nbgrader generate_assignment failed ({done.returncode}):\n{done.stderr[-3000:]}"
            )
        return json.loads(release.read_text(encoding="utf-8"))

    def collect(self, student: str, notebook: str | Path) -> None:
        """Copy a student's saved notebook into ``submitted/<student>/<assignment>/``."""
        folder = self.root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, folder / f"{ASSIGNMENT}.ipynb")
        self._chown(self.root / "submitted")

    def autograde(self, student: str) -> Grade:
        """Grade one student's submission with ``nbgrader autograde``; the score is read from the gradebook."""
        t0 = time.monotonic()
        try:
            done = self.nbgrader("autograde", ASSIGNMENT, "--student", student, "--force")
        except subprocess.TimeoutExpired:
            return Grade(
                student, None, None, time.monotonic() - t0, error=f"autograde ran past {self.timeout:.0f} s"
            )
        seconds = time.monotonic() - t0
        if done.returncode != 0:
            return Grade(
                student,
                None,
                None,
                seconds,
                error=f"autograde exited {done.returncode}: {done.stderr[-800:]}",
            )
        from nbgrader.api import Gradebook  # the bench's own interpreter reads the gradebook the grader wrote

        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gradebook:
            submission = gradebook.find_submission(ASSIGNMENT, student)
            score, max_score = submission.score, submission.max_score
        return Grade(student, score, max_score, seconds, feedback=self._feedback(student))

    def _feedback(self, student: str) -> str:
        path = self.root / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except OSError:
            return ""
        for cell in nb["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("grade"):
                parts = []
                for out in cell.get("outputs", []):
                    parts.append(
                        "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
                    )
                    if out["output_type"] == "error":
                        parts.append(f"{out['ename']}: {out['evalue'][:300]}")
                return "\n".join(p for p in parts if p)
        return ""

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
