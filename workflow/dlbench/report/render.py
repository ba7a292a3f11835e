"""Render one report directory: data copies, plots, index.html (jinja2 template) and README.md."""

from __future__ import annotations

import base64
import mimetypes
import re
import shutil
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from .. import __version__
from ..collect import expectations as expected
from ..collect import fleet
from ..collect import history as versions
from ..collect.aggregate import SUMMARY_COLUMNS, real_vs_synthetic
from ..collect.references import study_references
from .format import DASH, fmt_num, fmt_text, md_escape
from .headline import hardware_line, headline_rows, measured_line, study_conditions, study_wide_flags
from .load import RECORD_COLUMNS, load_environment, read_table
from .notes import caveats, mfu_caveat
from .plots import write_fleet, write_history, write_plots, write_quality_plots, write_real_vs_synthetic
from .sections import ReportInputs, build_sections, confidence_level, pair_label, supported_ratios
from .tables import (
    build_groups,
    detail_rows,
    detail_tables,
    environment_view,
    failure_rows,
    group_markdown,
    overview,
    rows_markdown,
)

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "templates"
TEMPLATE_NAME = "report.html.j2"
DATA_FILES = ("records.csv", "summary.csv", "records.parquet", "summary.parquet", "environment.json")
PARQUET_FILES = ("records.parquet", "summary.parquet")
NO_PARQUET_NOTE = (
    "records.parquet and summary.parquet were not written: pyarrow is not installed in the core environment "
    "(it is optional; the CSV files hold the same data; bootstrap.sh without a lean wheelhouse installs it)"
)


def parquet_available() -> bool:
    """Whether pandas can write Parquet here: pyarrow is optional in the core environment (envs/core.yaml)."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


LOCAL_LINK = re.compile(r'(src|href)="([A-Za-z0-9_.-]+)"')  # a link to a file beside index.html


def tool_version_text(env: dict[str, Any]) -> str:
    """This dlbench's version, and the versions that made the runs where they differ from it (a run log's header
    names its version; imported logs of other tools and logs older than versioning name none)."""
    runs = [str(v) for v in env.get("dlbench_versions") or [] if v]
    others = [v for v in runs if v != __version__]
    return __version__ + (f" (runs made by {', '.join(runs)})" if others else "")


def fleet_lines(table: pd.DataFrame) -> list[str]:
    """A sweep's answer first: per configuration the fleet's median and spread, its slowest and fastest nodes, and
    the nodes that do not pass, by verdict."""
    lines = []
    for s in fleet.fleet_summary(table):
        unit = f" {s['unit']}" if s["unit"] else ""
        parts = [f"Fleet {s['configuration']}: {s['nodes']} nodes"]
        if s["fleet_median"] is not None:
            parts.append(f"median {fmt_num(s['fleet_median'])}{unit}")
        if s["spread"] is not None:
            parts.append(f"slowest node's median ÷ fastest's {s['spread']:.2f}")
        if s["slowest"] and s["fastest"]:
            (slow, slow_ratio), (fast, fast_ratio) = s["slowest"], s["fastest"]
            parts.append(f"slowest {slow} ({slow_ratio:.3f} × the rest), fastest {fast} ({fast_ratio:.3f} ×)")
        for verdict, nodes in s["not_passing"].items():
            more = f" and {len(nodes) - VERDICT_LINES} more" if nodes[VERDICT_LINES:] else ""
            shown = ", ".join(nodes[:VERDICT_LINES]) + more
            parts.append(f"{verdict}: {shown}")
        lines.append("; ".join(parts) + ("" if s["not_passing"] else " ✓"))
    return lines


def verdict_lines(judgements: list[dict[str, Any]], changes: pd.DataFrame) -> list[str]:
    """What the report says first: the expectations' summary and each one not passed, and the configurations
    slower than in an earlier version (every line but an all-pass summary is an alert)."""
    lines = []
    if judgements:
        passed = all(j["verdict"] == expected.PASS for j in judgements)
        lines.append(f"Expectations: {expected.summary_line(judgements)}" + (" ✓" if passed else ""))
        lines += expected.failure_lines(judgements)[:VERDICT_LINES]
    for since, configs in versions.slower_since(changes).items():
        shown = ", ".join(configs[:VERDICT_LINES]) + (
            f" and {len(configs) - VERDICT_LINES} more" if configs[VERDICT_LINES:] else ""
        )
        lines.append(f"Slower than {since}: {len(configs)} configuration{'s' if len(configs) > 1 else ''} ({shown})")
    return lines


VERDICT_LINES = 10  # failures named at the top of a report; the expectations section has them all


def markdown(ctx: dict[str, Any]) -> str:
    lines = [f"# {md_escape(ctx['title'], table=False)}", ""]
    meta = [f"- Generated: {ctx['generated_at']} by dlbench {ctx['tool_version']}"]
    if ctx["git_commit"]:  # dlbench's commit for its own runs; imported logs have none
        meta.append(f"- Git commit: `{ctx['git_commit']}`")
    if ctx["version"]:
        meta.insert(0, f"- Report version: {ctx['version']}")
    lines += meta + [""]
    lines += [
        f"**Hardware:** {md_escape(ctx['hardware'], table=False)}",
        "",
        f"**Measured:** {md_escape(ctx['measured'], table=False)}",
        "",
        *(f"**{md_escape(line, table=False)}**\n" for line in ctx["verdicts"]),
        rows_markdown(ctx["headline"]),
        "",
        *(f"**Study-wide:** {md_escape(c, table=False)}\n" for c in ctx["conditions"]),
    ]
    for note in ctx["notes"]:
        lines += [f"> **Note:** {md_escape(note, table=False)}", ">"]
    if ctx["notes"]:
        lines[-1] = ""
    o = ctx["overview"]
    lines += [
        (
            f"{o['configs']} configurations: {o['configs_ok']} fully successful, "
            f"{o['configs_partial']} partially failed, {o['configs_failed']} failed, "
            f"{o['configs_unsupported']} unsupported; {o['runs_ok']}/{o['runs']} runs ok"
            + (f", {o['runs_unsupported']} unsupported." if o["runs_unsupported"] else ".")
        ),
        "",
        "## Throughput",
        "",
    ]
    if not ctx["groups"]:
        lines += ["_No configurations._", ""]
    for group in ctx["groups"]:
        lines += [
            f"### {md_escape(group['title'], table=False)}",
            "",
            f"_{md_escape(group['caption'], table=False)}_",
            "",
            group["markdown"],
            "",
        ]
    lines += [
        "## Plots",
        "",
        "![Throughput vs. devices](throughput.png)",
        "",
        "![Speedup vs. devices](speedup.png)",
        "",
        *(["![Samples per joule vs. devices](energy.png)", ""] if ctx.get("energy_plot") else []),
        *(["![Real ÷ synthetic data](real_vs_synthetic.png)", ""] if ctx.get("input_plot") else []),
        *(["![Across published versions](history.png)", ""] if ctx.get("history_plot") else []),
        *(["![Every node against the fleet](fleet.png)", ""] if ctx.get("fleet_plot") else []),
        *(
            [
                "![Convergence curves](convergence.png)",
                "",
                "![Samples to converge vs. batch size](samples_to_converge.png)",
                "",
            ]
            if ctx.get("quality_plots")
            else []
        ),
        "## Failed and unsupported runs",
        "",
        rows_markdown(ctx["failures"], limit=300),
        "",
    ]
    for section in ctx["sections"]:
        lines += [
            f"## {section.title}",
            "",
            f"_{md_escape(section.caption, table=False)}_",
            "",
            rows_markdown(section.rows),
            "",
        ]
    lines += ["## Per-configuration details", ""]
    for title, rows in ctx["details"]:
        lines += [f"### {title}", "", rows_markdown(rows), ""]
    if not ctx["details"]:
        lines += ["_None._", ""]
    env = ctx["env"]
    lines += [
        "## Environment",
        "",
        f"- Hosts: {md_escape(', '.join(env['hosts']), table=False) or DASH}",
        f"- CPU models: {md_escape('; '.join(env['cpu_models']), table=False) or DASH}",
        f"- Devices: {md_escape('; '.join(env['devices']), table=False) or DASH}",
        *(f"- Peak for MFU: {md_escape(line, table=False)}" for line in env["device_peaks"]),
        *([f"- Git commit: `{ctx['git_commit']}`"] if ctx["git_commit"] else []),
        "",
    ]
    if env["frameworks"]:
        fw_rows = [
            {
                "Framework": f["name"],
                "Version": f["version"],
                "Python": f["python"],
                "CUDA": f["cuda"],
                "cuDNN": f["cudnn"],
                "Settings": f["settings"],
                "Packages": ", ".join(f["packages"]) or DASH,
            }
            for f in env["frameworks"]
        ]
        lines += [rows_markdown(fw_rows), ""]
    if env["config_yaml"]:
        lines += ["### Study configuration", "", "```yaml", env["config_yaml"].rstrip(), "```", ""]
    lines += ["## Data files", "", ", ".join(f"[{f}]({f})" for f in ctx["data_files"]), ""]
    return "\n".join(lines)


def render_report(
    records_csv: Path,
    summary_csv: Path,
    environment_json: Path,
    out_dir: Path,
    version: str | None = None,
    baseline: pd.DataFrame | None = None,
    baseline_label: str = "",
    earlier: Sequence[tuple[str, pd.DataFrame]] = (),
) -> None:
    """Write into out_dir (created; must not exist yet or be empty): index.html, README.md,
    records.csv, summary.csv, records.parquet, summary.parquet (when pyarrow is installed; a note says when not),
    environment.json (copies), throughput.png, speedup.png. `version` is only shown in the page header;
    `baseline`: the records of the set this version is compared with (report.compare_to), named `baseline_label`;
    `earlier`: the study's published versions before this one (name, records), oldest first: the history, and what
    the expectations of the previous version are judged against (expectations.json, read by `snakemake`'s end)."""
    records_csv, summary_csv = Path(records_csv), Path(summary_csv)
    environment_json, out_dir = Path(environment_json), Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"report directory {out_dir} exists and is not empty")

    records = read_table(records_csv, RECORD_COLUMNS)
    summary = read_table(summary_csv, SUMMARY_COLUMNS)
    env = load_environment(environment_json)
    out_dir.mkdir(parents=True, exist_ok=True)

    # Raw copies (byte-identical) plus typed Parquet versions where pyarrow is installed.
    shutil.copyfile(records_csv, out_dir / "records.csv")
    shutil.copyfile(summary_csv, out_dir / "summary.csv")
    shutil.copyfile(environment_json, out_dir / "environment.json")
    parquet = parquet_available()
    if parquet:
        records.to_parquet(out_dir / "records.parquet", index=False)
        summary.to_parquet(out_dir / "summary.parquet", index=False)
    data_files = [f for f in DATA_FILES if parquet or f not in PARQUET_FILES]

    # A sweep's configurations, one per node, are the fleet's section and plot, not a table and a line each.
    unswept = summary[summary["node"].isna()] if "node" in summary else summary
    swept = len(unswept) < len(summary)
    energy_plot = write_plots(
        unswept, out_dir, "a sweep: every node is in fleet.png" if swept else "no successful runs"
    )
    level = confidence_level(env)
    pairs = supported_ratios(real_vs_synthetic(records, level), ("n_real", "n_synthetic"), level)
    input_plot = write_real_vs_synthetic(pairs, out_dir, pair_label)
    quality_plots = write_quality_plots(records, summary, out_dir)
    config = env.get("config") or {}
    down = fleet.nodes_of((env.get("sweep") or {}).get("nodes") or [])  # a sweep's nodes that took no job
    tolerance = (config.get("sweep") or {}).get("tolerance", fleet.DEFAULT_TOLERANCE)
    fleet_table = fleet.fleet_table(records, down, tolerance, level)
    fleet_plot = write_fleet(fleet_table, out_dir, tolerance)
    judgements = expected.judge(
        config.get("expectations") or [], records, summary, earlier, study_references(config), level, down
    )
    if config.get("expectations"):
        expected.write(out_dir / expected.FILE, judgements)
    points, changes = versions.history(records, earlier, level) if earlier else (pd.DataFrame(), pd.DataFrame())
    history_plot = write_history(points, out_dir)

    groups = build_groups(unswept, frozenset(study_wide_flags(unswept)))
    for group in groups:
        group["markdown"] = group_markdown(group)
    study = fmt_text(env.get("study")) or "dlbench"
    extra_notes = env.get("notes") or []  # environment.json may carry notes of its own
    notes = caveats(records) + mfu_caveat(summary)
    notes += [str(n) for n in (extra_notes if isinstance(extra_notes, list) else [extra_notes])]
    if not parquet:
        notes.append(NO_PARQUET_NOTE)
    inputs = ReportInputs(
        records, summary, env, baseline, baseline_label, history=changes, earlier_versions=len(earlier)
    )
    inputs = replace(inputs, judgements=tuple(judgements), builds=inputs.builds_compared(), fleet=fleet_table)
    ctx: dict[str, Any] = {
        "title": f"{study} — training throughput report",
        "study": study,
        "version": version or "",
        "generated_at": fmt_text(env.get("generated_at")) or datetime.now(UTC).isoformat(timespec="seconds"),
        "rendered_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": fmt_text(env.get("git_commit")),  # none: not said (imports only)
        "tool_version": tool_version_text(env),
        "notes": notes,
        "hardware": hardware_line(env, records),
        "measured": measured_line(summary, records),
        "headline": headline_rows(summary, inputs.builds_compared()),
        "verdicts": fleet_lines(fleet_table) + verdict_lines(judgements, changes),
        "fleet_plot": fleet_plot,
        "conditions": study_conditions(summary, level),
        "overview": overview(summary, records),
        "groups": groups,
        "failures": failure_rows(summary, records),
        "details": detail_tables(detail_rows(summary)),
        "energy_plot": energy_plot,
        "input_plot": input_plot,
        "quality_plots": quality_plots,
        "history_plot": history_plot,
        "sections": build_sections(inputs),
        "env": environment_view(env),
        "data_files": data_files,
    }

    jenv = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    html = jenv.get_template(TEMPLATE_NAME).render(**ctx)
    (out_dir / "index.html").write_text(html, encoding="utf-8")
    (out_dir / "README.md").write_text(markdown(ctx), encoding="utf-8")


def self_contained_html(report_dir: Path) -> str:
    """index.html with every link to a file beside it (plots, data files, README.md) replaced by the file itself
    as a data: URI, so the page reads the same wherever it is copied alone (Snakemake's --report embeds it)."""
    report_dir = Path(report_dir)

    def inline(match: re.Match[str]) -> str:
        attribute, name = match.groups()
        path = report_dir / name
        if not path.is_file():
            return match.group(0)
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        download = f' download="{name}"' if attribute == "href" else ""
        return f'{attribute}="data:{kind};base64,{data}"{download}'

    return LOCAL_LINK.sub(inline, (report_dir / "index.html").read_text(encoding="utf-8"))
