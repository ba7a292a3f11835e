"""How many tries Snakemake makes of a run, known inside cluster jobs too (core environment).

Snakemake starts each cluster job's own Snakemake with `--retries 0`, so the main process hands the
number down in an environment variable, which sbatch exports to the job.
"""

from __future__ import annotations

import os

VARIABLE = "DLBENCH_MAX_ATTEMPTS"


def max_attempts(remote: bool, retries: int | None) -> int:
    """Tries in all: Snakemake's retries + 1 (`retries` is None while parsing and in dry runs)."""
    if remote:
        return int(os.environ.get(VARIABLE, "1"))
    attempts = (retries or 0) + 1
    os.environ[VARIABLE] = str(attempts)
    return attempts
