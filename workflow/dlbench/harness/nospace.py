"""A full disk (or a quota, or a file-size limit) met while writing: one message naming where, not a traceback.

Standard library only: the harness (in the framework environments), the core environment's scripts and the Snakefile
share it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TextIO

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_no_space(error: BaseException | None) -> bool:
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
    """End a Snakemake script with `dlbench: problem`, said once: in the job's log, which Snakemake shows under the
    failed job (show-failed-logs, the workflow profiles' setting), after everything else the job said; on the
    terminal only where the log cannot take it (it may be on the full file system too)."""
    try:
        print(f"dlbench: {problem}", file=log, flush=True)
    except OSError:
        with contextlib.suppress(OSError):
            log.close()  # what it still holds cannot be written either: no second error when the script exits
        print(f"dlbench: {problem}", file=sys.__stderr__, flush=True)
    sys.exit(1)


def quiet_logging() -> None:
    """In Snakemake's own process: a log line that cannot be written for want of space (its log file,
    .snakemake/log/, on the full disk) is dropped without Python's '--- Logging error ---' traceback, one per
    line, which buried dlbench's message; the line still reaches the terminal. Other logging errors are shown."""
    show = logging.Handler.handleError

    def handle_error(self: logging.Handler, record: logging.LogRecord) -> None:  # the method it replaces
        if not is_no_space(sys.exc_info()[1]):
            show(self, record)

    logging.Handler.handleError = handle_error  # type: ignore[method-assign]
