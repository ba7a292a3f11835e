"""Resume after a crash with one command: the lock of a Snakemake that no longer runs is removed.

Snakemake 9 locks its working directory with files in .snakemake/locks/ and removes them when it ends. A
Snakemake killed by SIGKILL (the OOM killer, a lost login node) leaves them behind, and every later run stops
with "Directory cannot be locked" until `snakemake --unlock`. The files do not say who holds them, so every
Snakemake of this workflow also holds a kernel lock (flock) on .snakemake/dlbench.alive while it lives; the
kernel drops it when the process dies, however it dies. A Snakemake that can take that lock exclusively knows
that no other Snakemake of this workflow is alive in the directory: Snakemake's lock files are stale.
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
