"""The versioned benchmark report (core environment).

    load.py     records.csv / summary.csv / environment.json -> typed frames
    format.py   how values read (numbers, speedups, failure labels, Markdown escaping)
    headline.py the first screen: hardware line, what was measured, headline table, study-wide conditions
    notes.py    caveats shown after it, each naming what it applies to (image size, CPU runs, steps, ...)
    tables.py   DLPerf-style tables, details, failures, environment
    plots.py    throughput and speedup plots (line style: every other axis that varies), real ÷ synthetic
    render.py   one report directory: data copies, plots, index.html (templates/report.html.j2), README.md;
                the self-contained copy of index.html Snakemake's --report embeds
    publish.py  versioned publishing (never overwrites; latest, latest.json)

A new report section: its rows in tables.py (or a module of its own), its place in render.py's context and
the template, its Markdown in render.markdown.
"""

from .publish import CannotPublish, ReportVersionExists, clear_copy, copy_version, publish_changed, publish_report
from .render import render_report

__all__ = [
    "CannotPublish",
    "ReportVersionExists",
    "clear_copy",
    "copy_version",
    "publish_changed",
    "publish_report",
    "render_report",
]
