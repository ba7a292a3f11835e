"""No orphans: a run's processes never outlive the processes that own them (Linux; standard library only).

Three ties, because each one covers a death the others cannot see:

- Parent-death signal. Every child the supervisor starts (a rank, `srun`, a runner's command) asks the kernel
  (prctl PR_SET_PDEATHSIG) for a signal when the supervisor dies, whatever killed it (SIGKILL included).
- The guard. A small process forked from the supervisor into a session of its own, so that signals aimed at
  the supervisor's group (a terminal's Ctrl-C, `kill -- -PGID`) miss it. It reads a pipe that only the
  supervisor writes: the process groups to watch, then "done" at a normal end. End of file without "done"
  means the supervisor died, and the guard kills those groups: the ranks and everything they started (MXNet's
  kvstore servers, torchrun's workers, an srun step, which srun cancels on SIGTERM).
- The owner. Snakemake runs the supervisor through a shell, and that shell outlives a Snakemake killed by
  SIGKILL. dlbench.plan.session.mark_owner puts Snakemake's pid in DLBENCH_OWNER_PID; when that process is an
  ancestor of the supervisor and dies, the guard kills the supervisor and the groups at once, before the run
  can write anything more (so a restarted Snakemake never races a leftover run for the same files).

And one run, one supervisor: each holds a kernel lock on `.<log name>.lock` beside the run's log until it and
its guard are gone, so a second try of the same run (a restarted Snakemake, a SLURM job that a killed Snakemake
left running) waits for the first one's end, or stops with a message naming it, instead of writing the same files.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

OWNER_ENV = "DLBENCH_OWNER_PID"
GRACE_S = 5.0  # between SIGTERM and SIGKILL of a watched group (srun needs a moment to cancel its step)
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the guard still covers the supervisor's death
        return None


_PRCTL = _load_prctl()  # resolved here, not in a forked child


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A Popen preexec_fn: the child gets `sig` when the process that starts it dies."""
    parent = os.getpid()

    def arm() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def _ppid(pid: int) -> int | None:
    try:
        stat = open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace").read()  # noqa: SIM115
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # after the command name, which may hold anything


def owner_pid() -> int | None:
    """The owner named by DLBENCH_OWNER_PID when it is one of our ancestors (not a stale or stray value)."""
    try:
        owner = int(os.environ.get(OWNER_ENV, ""))
    except ValueError:
        return None
    pid: int | None = os.getppid()
    while pid and pid > 1:
        if pid == owner:
            return owner
        pid = _ppid(pid)
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_groups(pgids: list[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM each process group, SIGKILL what is left after grace_s."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_group_alive(g) for g in pgids):
            time.sleep(0.05)


class RunBusy(RuntimeError):
    """Another supervisor holds this run."""


def hold_run(log: Path, wait_s: float = 60.0) -> int | None:
    """Lock the run whose log is `log` for this process (and its guard, which inherits the lock and ends after
    the ranks): the descriptor, kept open until exit; None where the file system has no locks. A run held by
    another supervisor is waited for up to wait_s (a killed one's guard is still stopping its ranks), then
    RunBusy names the holder."""
    path = log.with_name(f".{log.name}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunBusy(
                    f"another supervisor is running this run ({holder}), e.g. a SLURM job left by a "
                    "Snakemake that was killed: let it end or cancel it (scancel), then run again"
                ) from None
            time.sleep(0.5)
        except OSError:  # no locks here (some network file systems)
            os.close(fd)
            return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()}\n".encode(), 0)
    return fd


class Guard:
    """The guard process of one supervisor (see the module's docstring). Start it before any child."""

    def __init__(self) -> None:
        owner = owner_pid()
        supervisor = os.getpid()
        read, self._write = os.pipe()  # not inherited by exec'd children: only we hold the write end
        first = os.fork()
        if first == 0:  # the guard: detached (double fork), so the supervisor's children are its ranks only
            os.close(self._write)
            code = 0
            try:
                os.setsid()
                if os.fork() == 0:
                    _watch(read, supervisor, owner)
            except BaseException:  # noqa: BLE001 - never return into the supervisor's code
                code = 1
            os._exit(code)
        os.close(read)
        os.waitpid(first, 0)

    def watch(self, pgid: int) -> None:
        """Kill this process group if the supervisor or its owner dies."""
        os.write(self._write, f"{pgid}\n".encode())

    def release(self) -> None:
        """A normal end: the groups are stopped, nothing to kill."""
        with contextlib.suppress(OSError):
            os.write(self._write, b"done\n")
            os.close(self._write)


def _pidfd(pid: int | None) -> int | None:
    """A pidfd of a live process (immune to pid reuse; readable once it exits), None without one."""
    if pid is None:
        return None
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone already, or no pidfd (Linux < 5.3): fall back to /proc
        return None


def _kill_supervisor(pid: int, pidfd: int | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _watch(read: int, supervisor: int, owner: int | None) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)  # not the supervisor's handlers, inherited through fork
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # stderr stays: the rule's log
    supervisor_fd, owner_fd = _pidfd(supervisor), _pidfd(owner)
    poller = select.poll()
    poller.register(read, select.POLLIN)
    if owner_fd is not None:
        poller.register(owner_fd, select.POLLIN)
    tick = 500 if owner is not None and owner_fd is None else None  # no pidfd: look every 0.5 s
    pgids: list[int] = []
    buffer = b""
    while True:
        events = dict(poller.poll(tick))
        if owner is not None and (owner_fd in events or (owner_fd is None and _ppid(owner) is None)):
            _kill_supervisor(supervisor, supervisor_fd)  # first: it must not write on, nor start more
            while data := os.read(read, 4096):  # its end closes as it dies: the last groups it started
                buffer += data
            kill_groups(pgids + [int(line) for line in buffer.split(b"\n") if line and line != b"done"])
            print(f"[dlbench] the workflow process {owner} died: stopped this run", file=sys.stderr)
            return
        if read not in events:
            continue
        data = os.read(read, 4096)
        if not data:  # the supervisor died without saying "done"
            kill_groups(pgids)
            return
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line == b"done":
                return
            pgids.append(int(line))
