"""Real system users for the classroom bench's students (runs as root, in the bench's process).

Names start with a prefix that nobody else uses (``dtfk<run>s<i>``, the grader ``dtfk<run>g1``), so that removing them can never touch a
real account: :func:`remove` refuses a name without the prefix, and :func:`leftovers` lists the bench's
accounts still on the machine (a run that was killed before its cleanup), for the next run to remove.

Example::

    names = create(prefix="dtfk7f3a", count=2)     # ['dtfk7f3as1', 'dtfk7f3as2'], each with a home folder
    remove(names, prefix="dtfk7f3a")               # ends their processes, deletes accounts and homes
"""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess

from hubbench.limits import kill_until_gone

PREFIX = "dtfk"  # every bench account starts with it (useradd names: 32 characters at most)


def new_prefix() -> str:
    """A fresh run prefix: ``dtfk`` + 4 hex digits."""
    return f"{PREFIX}{secrets.token_hex(2)}"


def create(prefix: str, count: int, role: str = "s") -> list[str]:
    """Add ``count`` users named ``{prefix}{role}1`` … with private homes; returns the names.

    ``role`` is ``s`` for students and ``g`` for the grader (the account nbgrader runs the submissions as).
    """
    if role not in ("s", "g"):
        raise ValueError(f"role is 's' (student) or 'g' (grader), not {role!r}")
    if not prefix.startswith(PREFIX):
        raise ValueError(f"bench user prefixes start with {PREFIX!r}, not {prefix!r}")
    if os.geteuid() != 0:
        raise PermissionError("the classroom bench makes one system user per student: run it as root")
    names = [f"{prefix}{role}{i}" for i in range(1, count + 1)]
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(
                [
                    "useradd",
                    "--create-home",
                    "--shell",
                    "/bin/bash",
                    "--user-group",
                    "--comment",
                    _owner_mark(),
                    name,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            made.append(name)
            os.chmod(pwd.getpwnam(name).pw_dir, 0o700)  # Debian's default home is 0755: readable by the class
    except subprocess.CalledProcessError as err:
        remove(made, prefix=prefix)
        raise RuntimeError(f"useradd {err.cmd[-1]} failed: {err.stderr.strip()}") from err
    return names


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def processes_of(name: str) -> list[int]:
    """Pids of every process running as ``name``."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def end_processes(name: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process of ``name`` until none is left (bounded); returns the pids it had to end."""
    return kill_until_gone(lambda: processes_of(name), f"the account {name}", timeout)


def remove(names: list[str], prefix: str) -> list[int]:
    """End the users' processes, then delete the users with their homes; returns the pids that were ended."""
    ended: list[int] = []
    for name in names:
        if not name.startswith(prefix) or not prefix.startswith(PREFIX):
            raise ValueError(f"refusing to remove {name!r}: not a bench user of prefix {prefix!r}")
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
        ended += end_processes(name)
        subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)
        # What the student left in the shared temporary folders: dtfkit's runtime folder /tmp/dtfkit-<uid>
        # (sockets, state, logs), checks' temporary folders, kernels' files.
        for shared in ("/tmp", "/dev/shm", "/var/tmp"):
            subprocess.run(
                [
                    "find",
                    shared,
                    "-mindepth",
                    "1",
                    "-maxdepth",
                    "1",
                    "-uid",
                    str(uid),
                    "-exec",
                    "rm",
                    "-rf",
                    "{}",
                    "+",
                ],
                check=False,
                capture_output=True,
            )
    return ended


def _owner_mark() -> str:
    """The account's comment: which process made it, so that a later run can tell a live run from a dead one."""
    return f"dtfkit classroom bench, pid {os.getpid()} started {_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (with the pid, it names one process for ever)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _owner_alive(comment: str) -> bool:
    parts = comment.split()
    try:
        pid, started = int(parts[parts.index("pid") + 1]), parts[parts.index("started") + 1]
    except (ValueError, IndexError):
        return False
    return _start_time(pid) == started


def leftovers() -> list[str]:
    """Bench accounts (``dtfk`` + 4 hex digits + ``s`` or ``g`` + a number) whose run has ended without removing them.

    An account whose creating process is still running belongs to a run in progress and is not listed.
    """
    found = []
    for entry in pwd.getpwall():
        rest = entry.pw_name[len(PREFIX) :]
        if entry.pw_name.startswith(PREFIX) and len(rest) > 5 and rest[4] in "sg" and rest[5:].isdigit():
            if not _owner_alive(entry.pw_gecos):
                found.append(entry.pw_name)
    return found
