"""Snakemake script of rule `report`: publish a new report version (never overwriting one)."""

import sys
from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # the dlbench package
sys.stderr = open(snakemake.log[0], "a")  # noqa: SIM115 - the job's log

from dlbench.report import ReportVersionExists, publish_report  # noqa: E402

try:
    version_dir = publish_report(
        Path(snakemake.input.records), Path(snakemake.input.summary), Path(snakemake.input.environment),
        Path(snakemake.output.manifest).parent, snakemake.params.version,
    )
except ReportVersionExists as error:
    print(f"dlbench: {error}", file=sys.__stderr__)
    print(f"dlbench: {error}", file=sys.stderr)
    sys.exit(1)
print(f"dlbench: wrote {version_dir}", file=sys.stderr)
