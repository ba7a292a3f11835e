"""A full disk (or a quota, or a file-size limit) met while writing: one message naming where, not a traceback.

Standard library only: the harness (in the framework environments) and the core environment's scripts share it.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TextIO

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_no_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE


def where(error: OSError, writing: str | Path) -> str:
    """The file the error is about: the destination the OS names (a copy or rename names its source first), else
    the file or directory the caller was writing (a failed write() names none)."""
    return str(error.filename2 or error.filename or writing)


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Writes to `path` inside: a full disk met there is an error naming `path` (a failed write() names no file; a
    copy names its source)."""
    try:
        yield
    except OSError as error:
        if not is_no_space(error):
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error


def message(error: OSError, writing: str | Path, kept: str) -> str:
    """What a user reads: the path, the reason, what to do, and what is kept (the caller's sentence)."""
    path = where(error, writing)
    return (
        f"no space left to write {path} ({error.strerror or 'no space left on device'}): free space on its file "
        f"system (df -h {Path(path).parent}), then run the same command again; {kept}"
    )


def stop(problem: str, log: TextIO) -> NoReturn:
    """End a Snakemake script with `dlbench: problem` on the terminal and in the job's log (where that can still
    be written: it may be on the full file system too)."""
    print(f"dlbench: {problem}", file=sys.__stderr__)
    try:
        print(f"dlbench: {problem}", file=log, flush=True)
    except OSError:
        pass
    sys.exit(1)
