"""Snakemake script of rule `report`: publish these results as a new report version (never overwriting one),
unless they are published already; then copy that version to the rule's outputs."""

import json
import shutil
import sys
from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # the dlbench package
sys.stderr = open(snakemake.log[0], "a")  # noqa: SIM115 - the job's log

from dlbench.report import ReportVersionExists, publish_changed  # noqa: E402
from dlbench.report.render import self_contained_html  # noqa: E402

try:
    version_dir, new = publish_changed(
        Path(snakemake.input.records),
        Path(snakemake.input.summary),
        Path(snakemake.input.environment),
        Path(snakemake.params.reports_dir),
        snakemake.params.version,
        snakemake.params.compare_to,
    )
except ReportVersionExists as error:
    print(f"dlbench: {error}", file=sys.__stderr__)
    print(f"dlbench: {error}", file=sys.stderr)
    sys.exit(1)
print(f"dlbench: {'wrote' if new else 'unchanged results, already published as'} {version_dir}", file=sys.stderr)

copy = Path(snakemake.output.manifest).parent
for item in version_dir.iterdir():
    if item.is_file():
        shutil.copyfile(item, copy / item.name)
# Snakemake's report embeds index.html alone: this copy carries its plots and data files inside it.
(copy / "index.html").write_text(self_contained_html(version_dir), encoding="utf-8")
manifest = {"version": version_dir.name, "path": str(version_dir), "index": str(version_dir / "index.html"), "new": new}
Path(snakemake.output.manifest).write_text(json.dumps(manifest, indent=2) + "\n")
