"""Resume after a crash with one command: the lock of a Snakemake that no longer runs is removed.

Snakemake 9 locks its working directory with files in .snakemake/locks/ and removes them when it ends. A
Snakemake killed by SIGKILL (the OOM killer, a lost login node) leaves them behind, and every later run stops
with "Directory cannot be locked" until `snakemake --unlock`. The files do not say who holds them, so every
Snakemake of this workflow also holds a kernel lock (flock) on .snakemake/dlbench.alive while it lives; the
kernel drops it when the process dies, however it dies. A Snakemake that can take that lock exclusively knows
that no other Snakemake of this workflow is alive in the directory: Snakemake's lock files are stale. One that
cannot names the live ones (the kernel's table of locks, /proc/locks), so that their lock is never taken for a
stale one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

ALIVE = "dlbench.alive"


def hold(metadata_dir: Path) -> tuple[int | None, bool]:
    """Mark this Snakemake alive in metadata_dir (.snakemake/) until it exits; remove Snakemake's lock files
    when no other Snakemake of this workflow is alive there. Returns (the descriptor to keep open, whether
    stale locks were removed)."""
    locks = metadata_dir / "locks"
    try:
        metadata_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(metadata_dir / ALIVE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None, False  # e.g. a read-only directory: Snakemake will say what is wrong
    removed = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass  # another Snakemake of this workflow is alive: its lock is real
    else:
        if any(locks.glob("*.lock")):
            shutil.rmtree(locks, ignore_errors=True)  # what `snakemake --unlock` does
            removed = True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # alive, alongside dry runs and other readers
    except OSError:  # no flock here (some network file systems): no detection, Snakemake's lock as it is
        os.close(fd)
        return None, removed
    return fd, removed


def holders(metadata_dir: Path) -> list[str]:
    """The other live Snakemakes of this workflow in the directory, each as "pid N (its command line)": the
    processes holding the kernel lock on metadata_dir/dlbench.alive (Linux's /proc/locks; none elsewhere)."""
    try:
        alive = os.stat(metadata_dir / ALIVE)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    device = f"{os.major(alive.st_dev):02x}:{os.minor(alive.st_dev):02x}:{alive.st_ino}"
    pids = []
    for line in table.splitlines():  # "1: FLOCK  ADVISORY  READ 10523 fe:00:2802114 0 EOF"
        fields = line.split()
        if "->" not in fields and len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            pid = int(fields[4])
            if pid != os.getpid() and pid not in pids:
                pids.append(pid)
    found = []
    for pid in pids:
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            continue  # ended since
        found.append(f"pid {pid} ({' '.join(w.decode(errors='replace') for w in words)})")
    return found
