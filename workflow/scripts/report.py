"""Snakemake script of rule `report`: publish these results as a new report version (never overwriting one),
unless they are published already; then make the rule's outputs a copy of that version."""

import sys
from pathlib import Path

snakemake = globals()["snakemake"]  # injected by Snakemake
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # the dlbench package
sys.stderr = open(snakemake.log[0], "a")  # noqa: SIM115 - the job's log

from dlbench.harness import nospace  # noqa: E402
from dlbench.report import CannotPublish, clear_copy, copy_version, publish_changed  # noqa: E402
from dlbench.report.publish import versions, what_is_published  # noqa: E402
from dlbench.report.render import self_contained_html  # noqa: E402

manifest_path = Path(snakemake.output.manifest)
reports_dir = Path(snakemake.params.reports_dir)
published_before = versions(reports_dir)  # to say, should this report fail, what it published nonetheless
writing = reports_dir  # where a full disk is met: the new version, then the copy
try:
    version_dir, new = publish_changed(
        Path(snakemake.input.records),
        Path(snakemake.input.summary),
        Path(snakemake.input.environment),
        reports_dir,
        snakemake.params.version,
        snakemake.params.compare_to,
    )
    print(f"dlbench: {'wrote' if new else 'unchanged results, already published as'} {version_dir}", file=sys.stderr)
    writing = manifest_path.parent
    manifest = {"version": version_dir.name, "path": str(version_dir), "index": str(version_dir / "index.html")}
    # Snakemake's report embeds index.html alone: the copy's index.html carries its plots and data files inside it.
    index = self_contained_html(version_dir)
    copy_version(version_dir, manifest_path, manifest | {"new": new}, texts={"index.html": index})
except BaseException as error:
    clear_copy(manifest_path.parent)
    if isinstance(error, CannotPublish):
        nospace.stop(str(error), sys.stderr)
    if nospace.is_no_space(error):
        published = what_is_published(reports_dir, published_before, manifest_path.parent)
        nospace.stop(nospace.message(error, writing, published), sys.stderr)
    raise
