"""Snakemake script of rule `aggregate`: parse every run log, aggregate, describe the environment."""

import sys
from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # the dlbench package
sys.stderr = open(snakemake.log[0], "a")  # noqa: SIM115 - the job's log for warnings

from dlbench.collect.aggregate import write_all  # noqa: E402
from dlbench.harness import nospace  # noqa: E402

try:
    write_all(
        list(snakemake.input.logs) + list(snakemake.input.found),
        list(snakemake.input.envs),
        dict(snakemake.params.study.settings),
        snakemake.output.records,
        snakemake.output.summary,
        snakemake.output.environment,
        import_paths=list(snakemake.input.imports),
        search_paths=list(snakemake.input.searches),
        cpu_peak_paths=list(snakemake.input.cpu_peaks),
        sweep_paths=list(snakemake.input.sweep),
    )
    read = Path(snakemake.output.inputs)  # what this aggregate read; the name says for which study (dlbench.plan.plan)
    with nospace.writing(read):
        read.write_text("".join(f"{path}\n" for path in snakemake.input))
    for other in read.parent.glob("inputs-*.txt"):
        if other != read:
            other.unlink()
except OSError as error:
    if not nospace.is_no_space(error):
        raise
    kept = "the run logs are kept and the published reports are unchanged"
    nospace.stop(nospace.message(error, Path(snakemake.output.records).parent, kept), sys.stderr)
