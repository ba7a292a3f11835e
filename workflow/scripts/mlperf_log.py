"""Snakemake script of rule `mlperf_log`: the MLPerf log of a time-to-quality run, from its dlbench log."""

import sys
from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # the dlbench package
sys.stderr = open(snakemake.log[0], "a")  # noqa: SIM115 - the job's log for warnings

from dlbench.collect.mlperf_writer import write_log  # noqa: E402

write_log(snakemake.input.run, snakemake.output.mlperf)
