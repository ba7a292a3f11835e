"""Tests for dlbench.report: rendering content and versioned publishing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import dlbench
from conftest import REPO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from dlbench.collect.aggregate import write_all
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.plan.study import load_schema
from dlbench.report import CannotPublish, ReportVersionExists, publish_changed, publish_report, render_report
from dlbench.report.headline import hardware_line
from dlbench.vocabulary import identity

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NOTE = "Images are 64x64, not 224x224: throughput is not comparable with published figures"
COMMIT = "1234e567"  # looks like a float; must survive as a string
SETTINGS = "oneDNN on (AVX2), 2 intra-op / 1 inter-op threads (OpenMP), channels_last"


def _config(framework: str, nodes: int, dpn: int) -> dict:
    return {
        "config_id": f"{framework}-resnet50-{nodes}x{dpn}-bs32-fp32",
        "framework": framework,
        "model": "resnet50",
        "topology": f"{nodes}x{dpn}",
        "nodes": nodes,
        "devices_per_node": dpn,
        "devices": nodes * dpn,
        "batch_size": 32,
        "precision": "fp32",
        "compiler": False,
        "data": "synthetic",
        "image_size": 64,
        "seq_length": None,
        "unit": "images/s",
    }


# (framework, nodes, devices_per_node) -> per-repeat (status, throughput, error)
RUNS = {
    ("jax", 1, 1): [("ok", 1100.0, None), ("ok", 1110.0, None), ("ok", 1090.0, None)],
    ("jax", 1, 2): [("oom", None, "RESOURCE_EXHAUSTED: out of memory <alloc>")] * 3,
    ("torch", 1, 1): [("ok", 1000.0, None), ("ok", 990.0, None), ("ok", 1010.0, None)],
    ("torch", 1, 2): [("ok", 1900.0, None), ("error", None, "NCCL error | rank 1"), ("ok", 1900.0, None)],
}


def _write_inputs(tmp_path: Path, runs: dict = RUNS) -> tuple[Path, Path, Path]:
    records, summary = [], []
    baselines: dict[str, float] = {}
    for (fw, nodes, dpn), reps in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        cfg = _config(fw, nodes, dpn)
        for i, (status, thr, err) in enumerate(reps):
            records.append(
                {
                    "run_id": f"{cfg['config_id']}-r{i}",
                    **cfg,
                    "global_batch_size": 32 * nodes * dpn,
                    "warmup_steps": 5,
                    "measured_steps": 20,
                    "repeat": i,
                    "status": status,
                    "error": err,
                    "throughput": thr,
                    "elapsed_s": 1.5,
                    "samples": 640,
                    "step_time_median_s": 0.03 if thr else None,
                    "loss_final": 6.9 if thr else None,
                    "hosts": "node1",
                    "framework_version": "1.0",
                    "device_name": "H100",
                    "cpu_model": "Xeon",
                    "threads_per_rank": 4,
                    "git_commit": COMMIT,
                    "started_at": "2024-01-01T00:00:00Z",
                    "log_path": f"logs/{cfg['config_id']}-r{i}.log",
                }
            )
        ok = pd.Series([t for s, t, _ in reps if s == "ok"], dtype=float)
        counts: dict[str, int] = {}
        for s, _, _ in reps:
            counts[s] = counts.get(s, 0) + 1
        row = {
            **cfg,
            "n_total": len(reps),
            "n_ok": len(ok),
            "n_failed": len(reps) - len(ok),
            "statuses": ";".join(f"{s}:{c}" for s, c in counts.items()),
            "error": next((e for _, _, e in reps if e), None),
        }
        if len(ok):
            med = float(ok.median())
            if (nodes, dpn) == (1, 1):
                baselines[fw] = med
            speedup = med / baselines[fw] if fw in baselines else None
            row.update(
                median=med,
                min=ok.min(),
                max=ok.max(),
                q25=ok.quantile(0.25),
                q75=ok.quantile(0.75),
                iqr=ok.quantile(0.75) - ok.quantile(0.25),
                cv=ok.std() / ok.mean(),
                speedup=speedup,
                efficiency=speedup / (nodes * dpn) if speedup else None,
            )
            if fw == "torch" and (nodes, dpn) == (1, 1):  # as if it had enough repeats for an interval
                row.update(ci_low=990.0, ci_high=1010.0, ci_level=0.95)
        summary.append(row)
    rec_csv, sum_csv, env_json = (tmp_path / "records.csv", tmp_path / "summary.csv", tmp_path / "environment.json")
    pd.DataFrame(records).to_csv(rec_csv, index=False)
    pd.DataFrame(summary).to_csv(sum_csv, index=False)
    env = {
        "study": "smoke",
        "generated_at": "2024-01-01T12:00:00+00:00",
        "git_commit": COMMIT,
        "dlbench_versions": ["0.9.0"],  # runs made by an earlier dlbench
        "config": {"study": "smoke", "models": ["resnet50"], "topologies": ["1x1", "1x2"]},
        "hosts": ["node1"],
        "cpu_models": ["Xeon"],
        "devices": ["H100"],
        "frameworks": {
            "torch": {
                "version": "2.3.0",
                "python": "3.11.9",
                "cuda": "12.1",
                "cudnn": "8.9",
                "packages": ["torch==2.3.0", "numpy==1.26.4"],
                "settings": {"summary": SETTINGS, "intra_op_threads": 2},
            },
            "jax": {
                "version": "0.4.30",
                "python": "3.11.9",
                "cuda": "12.3",
                "cudnn": "8.9",
                "packages": ["jax==0.4.30"],
            },
        },
        "notes": [NOTE, "Escaping check: <script>alert(1)</script>"],
    }
    env_json.write_text(json.dumps(env), encoding="utf-8")
    return rec_csv, sum_csv, env_json


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    return _write_inputs(tmp_path)


def test_publish_auto_creates_new_versions_and_updates_latest(tmp_path, inputs):
    reports = tmp_path / "reports"
    v1 = publish_report(*inputs, reports, "auto")
    assert v1 == reports / "v1" and (v1 / "index.html").is_file()
    v1_bytes = (v1 / "index.html").read_bytes()
    v1_readme = (v1 / "README.md").read_bytes()

    v2 = publish_report(*inputs, reports, "auto")
    assert v2 == reports / "v2" and (v2 / "index.html").is_file()
    assert (v1 / "index.html").read_bytes() == v1_bytes
    assert (v1 / "README.md").read_bytes() == v1_readme

    latest = reports / "latest"
    assert latest.is_symlink() and os.readlink(latest) == "v2"
    assert latest.resolve() == v2.resolve()
    info = json.loads((reports / "latest.json").read_text())
    assert info["version"] == "v2"
    assert info["path"] == str(v2)
    assert info["index"] == str(v2 / "index.html")
    assert info["generated_at"]
    # No temporary directories or links left behind.
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "latest.json", "v1", "v2"]


def test_auto_uses_one_more_than_highest_existing(tmp_path, inputs):
    reports = tmp_path / "reports"
    (reports / "v7").mkdir(parents=True)
    (reports / "v7-notes").mkdir()
    assert publish_report(*inputs, reports, "auto").name == "v8"


def test_named_version_exists_is_never_overwritten(tmp_path, inputs):
    reports = tmp_path / "reports"
    first = publish_report(*inputs, reports, "baseline-1.0")
    assert first.name == "baseline-1.0"
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    with pytest.raises(ReportVersionExists) as exc:
        publish_report(*inputs, reports, "baseline-1.0")
    assert str(first) in str(exc.value) and "report.version" in str(exc.value)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert not [p for p in reports.iterdir() if p.name.startswith(".")]
    assert os.readlink(reports / "latest") == "baseline-1.0"


def test_publish_changed_publishes_only_new_results(tmp_path, inputs):
    """A report rule rerun (after a failure, a lost manifest) republishes nothing when the results are the same."""
    reports = tmp_path / "reports"
    assert publish_changed(*inputs, reports, "auto") == (reports / "v1", True)
    latest_json = (reports / "latest.json").read_bytes()
    env = json.loads(inputs[2].read_text())
    inputs[2].write_text(json.dumps({**env, "generated_at": "2030-01-01T00:00:00+00:00"}))  # aggregate rewritten
    assert publish_changed(*inputs, reports, "auto") == (reports / "v1", False)
    assert (reports / "latest.json").read_bytes() == latest_json
    assert publish_changed(*inputs, reports, "paper") == (reports / "paper", True)  # a new name: published
    assert publish_changed(*inputs, reports, "paper") == (reports / "paper", False)  # same results: reused
    inputs[0].write_text(inputs[0].read_text().replace("1100.0", "1200.0"))
    with pytest.raises(ReportVersionExists):
        publish_changed(*inputs, reports, "paper")  # new results under a published name: never overwritten
    assert publish_changed(*inputs, reports, "auto") == (reports / "v2", True)


@pytest.mark.parametrize("name", ["latest", "latest.json", "", "../escape", "a/b", "with space", ".hidden", "v1*"])
def test_invalid_version_names_rejected(tmp_path, inputs, name):
    reports = tmp_path / "reports"
    with pytest.raises(ValueError):
        publish_report(*inputs, reports, name)
    assert not (tmp_path / "escape").exists()
    assert not reports.exists() or not any(reports.iterdir())


def test_the_schema_reserves_the_names_the_publisher_writes():
    """A study's report.version is refused before any job where the publisher writes that name itself (`latest`,
    `latest.json`): the schema cannot import identity.py and lists them again."""
    version = load_schema(SCHEMA)["properties"]["report"]["properties"]["version"]
    assert version["not"] == {"enum": list(identity.RESERVED_VERSIONS)}


def test_something_else_at_the_publishers_own_paths_stops_it_before_it_writes(tmp_path, inputs):
    """A directory where the publisher writes latest.json (a report an older dlbench published under that name)
    would fail every later report after its version was published: refused first, naming it and what to do;
    moved away, the next report publishes."""
    reports = tmp_path / "reports"
    (reports / "latest.json").mkdir(parents=True)
    (reports / "latest.json" / "index.html").write_text("a report")
    with pytest.raises(CannotPublish) as refused:
        publish_changed(*inputs, reports, "auto")
    assert f"{reports / 'latest.json'} is a directory" in str(refused.value)
    assert f"mv {reports / 'latest.json'} {reports}/<another name>" in str(refused.value)
    assert sorted(p.name for p in reports.iterdir()) == ["latest.json"]  # nothing written
    (reports / "latest.json").rename(reports / "old")
    assert publish_changed(*inputs, reports, "auto") == (reports / "v1", True)
    assert json.loads((reports / "latest.json").read_text())["version"] == "v1"


def test_a_stale_latest_json_is_mended_when_the_newest_version_is_reused(tmp_path, inputs):
    """`latest` moved but latest.json not written (the disk filled in between): the next report, finding these
    results published as the newest version, makes latest.json name it."""
    reports = tmp_path / "reports"
    publish_report(*inputs, reports, "auto")
    publish_report(*inputs, reports, "auto")
    info = reports / "latest.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "version": "v1"}))
    assert publish_changed(*inputs, reports, "auto") == (reports / "v2", False)
    assert json.loads(info.read_text())["version"] == "v2"
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "latest.json", "v1", "v2"]


def test_a_deleted_latest_json_is_made_again_without_publishing(tmp_path, inputs):
    """The planning Snakemake mends the pointer whenever it runs jobs (dlbench.plan.session.mend_latest_info)."""
    from dlbench.report.publish import mend_latest_info

    reports = tmp_path / "reports"
    publish_report(*inputs, reports, "auto")
    assert mend_latest_info(reports) is None  # whole: nothing to do
    (reports / "latest.json").unlink()
    assert "names v1 again" in mend_latest_info(reports)
    assert json.loads((reports / "latest.json").read_text())["version"] == "v1"
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "latest.json", "v1"]


def test_report_content(tmp_path, inputs):
    out = publish_report(*inputs, tmp_path / "reports", "auto")
    names = {p.name for p in out.iterdir()}
    assert names == {
        "index.html",
        "README.md",
        "records.csv",
        "summary.csv",
        "records.parquet",
        "summary.parquet",
        "environment.json",
        "throughput.png",
        "speedup.png",
    }
    html = (out / "index.html").read_text(encoding="utf-8")

    # Failed cell shows its status, partial cell its median plus k/n ok marker.
    assert re.search(r"<td[^>]*>OOM \(3/3\)</td>", html)
    assert re.search(r"<td[^>]*>1900\.0 \(2/3 ok\)</td>", html)
    # The median with its confidence interval; with too few repeats for one, the median and n.
    assert re.search(r"<td[^>]*>1000\.0 \[990\.0–1010\.0\]</td>", html)
    assert re.search(r"<td[^>]*>1100\.0 \(n=3\)</td>", html)
    assert "1.90×" in html and "95%" in html
    assert "images/s" in html and "smoke" in html and COMMIT in html
    # the dlbench that reports, and the one that made the runs where it is another
    assert f"by dlbench {dlbench.__version__} (runs made by 0.9.0)" in html
    # Logs without the node's facts (older ones, imports): the hardware line says what it lacks.
    assert "Hardware:</strong> Xeon (logical CPUs, memory and OS not recorded in these logs)" in html
    assert "accelerators: 2× H100 per node" in html
    # A partly failed framework's row in the headline says so.
    assert re.search(r"<td[^>]*>jax</td><td[^>]*>resnet50</td>.*?1 of 2 configurations failed", html, re.S)
    # Notes near the top, HTML-escaped.
    assert NOTE in html and html.index(NOTE) < html.index('id="throughput"')
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    # Failures section with the first message, escaped.
    assert "RESOURCE_EXHAUSTED: out of memory &lt;alloc&gt;" in html
    assert "NCCL error | rank 1" in html
    # Environment and config YAML; each framework's settings in effect, summarised.
    assert "torch==2.3.0" in html and "0.4.30" in html
    assert re.search(rf"<td[^>]*>{re.escape(SETTINGS)}</td>", html)
    assert "topologies:" in html and "- 1x2" in html
    for png in ("throughput.png", "speedup.png"):
        assert re.search(rf'<img[^>]+src="{png}"', html)
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1024

    records = pd.read_parquet(out / "records.parquet")
    assert len(records) == len(pd.read_csv(inputs[0])) == 12
    assert set(records["git_commit"]) == {COMMIT}
    summary = pd.read_parquet(out / "summary.parquet")
    assert len(summary) == 4 and summary["compiler"].dtype == "boolean"
    assert (out / "records.csv").read_bytes() == inputs[0].read_bytes()
    assert json.loads((out / "environment.json").read_text())["study"] == "smoke"

    readme = (out / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^\| Topology +\| Devices +\| Framework +\| Throughput .*\| Flags +\|$", readme, re.MULTILINE)
    assert re.search(r"^\|[-:|]+\|$", readme, re.MULTILINE)
    assert "OOM (3/3)" in readme and "![Throughput vs. devices](throughput.png)" in readme
    assert "NCCL error \\| rank 1" in readme  # pipes escaped in table cells
    assert "out of memory &lt;alloc&gt;" in readme  # no raw HTML on GitHub
    assert NOTE in readme
    assert re.search(rf"^\| torch .*\| {re.escape(SETTINGS)} \|", readme, re.MULTILINE)


def test_all_failed_still_renders(tmp_path):
    runs = {
        ("torch", 1, 1): [("oom", None, "CUDA out of memory")] * 3,
        ("torch", 1, 2): [("unsupported", None, "no multi-device support")] * 3,
        ("jax", 1, 1): [("timeout", None, "timed out"), ("error", None, "boom"), ("timeout", None, "timed out")],
    }
    inputs = _write_inputs(tmp_path, runs)
    out = tmp_path / "report"
    render_report(*inputs, out)
    html = (out / "index.html").read_text(encoding="utf-8")
    assert re.search(r"<td[^>]*>OOM \(3/3\)</td>", html)
    assert re.search(r"<td[^>]*>unsupported</td>", html)
    assert re.search(r"<td[^>]*>timeout \(2/3\); error \(1/3\)</td>", html)
    # Unsupported is not failed, wherever the report counts: the headline, the summary line, Markdown and HTML.
    headline = re.search(r"<tr><td[^>]*>torch</td><td[^>]*>resnet50</td>(.*?)</tr>", html, re.S).group(1)
    assert "1 of 2 configurations failed, 1 of 2 configurations unsupported" in headline
    summary_line = "3 configurations: 0 fully successful, 0 partially failed, 2 failed, 1 unsupported"
    assert summary_line in " ".join(html.split())
    markdown = (out / "README.md").read_text(encoding="utf-8")
    assert f"{summary_line}; 0/9 runs ok, 3 unsupported." in markdown
    for png in ("throughput.png", "speedup.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1024
    assert len(pd.read_parquet(out / "summary.parquet")) == 3


def test_report_without_pyarrow(tmp_path, inputs):
    """pyarrow is optional (a lean wheelhouse leaves it out): the report is written without the Parquet copies and
    says so, in its notes and its list of data files."""
    out = tmp_path / "report"
    # A Python where pyarrow cannot be imported from the start (pandas included), as in a lean core environment.
    script = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "from dlbench.report import render_report\n"
        "render_report(*sys.argv[1:4], sys.argv[4])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    subprocess.run([sys.executable, "-c", script, *map(str, inputs), str(out)], check=True, env=env)
    names = {p.name for p in out.iterdir()}
    assert "records.csv" in names and "summary.csv" in names
    assert not names & {"records.parquet", "summary.parquet"}
    html = (out / "index.html").read_text(encoding="utf-8")
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "records.parquet" not in html.split('id="data"')[1]
    assert "[records.csv](records.csv)" in readme and "(records.parquet)" not in readme
    for text in (html, readme):
        assert "pyarrow is not installed" in text


def test_header_only_inputs_render(tmp_path, inputs):
    for csv in inputs[:2]:
        header = csv.read_text().splitlines()[0]
        csv.write_text(header + "\n")
    out = tmp_path / "report"
    render_report(*inputs, out)
    assert "No configurations." in (out / "index.html").read_text()
    assert (out / "throughput.png").read_bytes().startswith(PNG_MAGIC)
    assert len(pd.read_parquet(out / "records.parquet")) == 0


def test_render_refuses_non_empty_directory(tmp_path, inputs):
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        render_report(*inputs, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_flags_and_published_references_sections(tmp_path):
    """Aggregated for real from run logs: three repeats are too few for an interval (flagged), and an 8-GPU
    PyTorch AMP configuration at 224x224 is set against NVIDIA's published figures with its ratio."""
    logs = [
        str(
            write_run_log(
                tmp_path / f"runs/rep{i}.jsonl",
                framework="pytorch",
                topology="1x8",
                batch_size=256,
                precision="amp",
                data="real",
                repeat=i,
                throughput=value,
            )
        )
        for i, value in enumerate((16000.0, 16621.0, 17000.0), start=1)
    ]
    config = {
        "study": "refs",
        "references": [str(REPO / "workflow/references/published.yaml")],
        "report": {"confidence": 0.95},
    }
    out = tmp_path / "agg"
    out.mkdir()
    write_all(logs, [], config, out / "records.csv", out / "summary.csv", out / "environment.json")
    render_report(out / "records.csv", out / "summary.csv", out / "environment.json", tmp_path / "report")
    readme = (tmp_path / "report/README.md").read_text()
    assert "## Flagged results" in readme and "few_repeats" in readme
    # Every configuration (the one) has too few repeats: said once above the tables, not on the cell.
    assert readme.count("at most 3 ok repeats") == 1 and re.search(r"\| pytorch +\| 16621\.0 +\|", readme)
    assert "## Against published figures" in readme
    dle = next(line for line in readme.splitlines() if "| 16621.0 " in line and "A100" in line)
    assert "| 1 " in dle  # our median / published = 16621 / 16621


def _aggregated(root: Path, throughputs: list[float], config: dict) -> tuple[Path, Path, Path]:
    logs = [
        str(write_run_log(root / f"runs/rep{i}.jsonl", repeat=i, throughput=value))
        for i, value in enumerate(throughputs, start=1)
    ]
    root.mkdir(parents=True, exist_ok=True)
    paths = (root / "records.csv", root / "summary.csv", root / "environment.json")
    write_all(logs, [], config, *paths)
    return paths


def test_compare_to_previous_gives_a_verdict(tmp_path):
    """report.compare_to: previous: the new version holds the comparison with the one before it."""
    reports = tmp_path / "reports"
    config = {"study": "cmp", "report": {"confidence": 0.95, "compare_to": "previous"}}
    first = publish_report(
        *_aggregated(tmp_path / "a", [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8], config),
        reports,
        "auto",
        "previous",
    )
    assert "## Compared with" not in (first / "README.md").read_text()  # nothing published before it
    second = publish_report(
        *_aggregated(tmp_path / "b", [90.0, 91.0, 89.0, 90.5, 89.5, 90.2, 89.8], config), reports, "auto", "previous"
    )
    readme = (second / "README.md").read_text()
    assert "## Compared with v1" in readme
    row = next(line for line in readme.splitlines() if line.startswith("| resnet50/pytorch/1x1"))
    assert "slower" in row and "0.90" in row


def _study(root: Path, runs: list[dict], config: dict | None = None) -> Path:
    """Run logs written for `runs` (write_run_log's arguments), aggregated for real and rendered: the report."""
    logs = [str(write_run_log(root / f"runs/{i}.jsonl", **run)) for i, run in enumerate(runs)]
    agg = root / "agg"
    agg.mkdir(parents=True)
    write_all(
        logs,
        [],
        config or {"study": "t", "report": {"confidence": 0.95}},
        agg / "records.csv",
        agg / "summary.csv",
        agg / "environment.json",
    )
    render_report(agg / "records.csv", agg / "summary.csv", agg / "environment.json", root / "report")
    return root / "report"


def test_real_over_synthetic_in_a_table_and_a_plot(tmp_path):
    """Each configuration run on both kinds of data gets median(real) / median(synthetic) with its interval; one run
    on synthetic data only gets no row; the plot exists."""
    synthetic, real = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5], [61.0, 60.0, 59.0, 60.5, 59.5, 60.2, 59.8]
    runs = [dict(data="synthetic", repeat=i, throughput=t, image_size=64) for i, t in enumerate(synthetic, 1)]
    runs += [dict(data="real", repeat=i, throughput=t, image_size=64) for i, t in enumerate(real, 1)]
    runs += [dict(data="synthetic", repeat=i, throughput=200.0, image_size=64, topology="1x2") for i in (1, 2, 3)]
    report = _study(tmp_path, runs)
    readme = (report / "README.md").read_text()
    assert "## Real ÷ synthetic data" in readme and "![Real ÷ synthetic data](real_vs_synthetic.png)" in readme
    rows = [
        line
        for line in readme.split("## Real ÷ synthetic data")[1].split("\n## ")[0].splitlines()
        if line.startswith("| pytorch")
    ]
    assert len(rows) == 1 and "1x1" in rows[0]  # the 1x2 configuration has no real-data twin
    expected = pd.Series(real).median() / pd.Series(synthetic).median()
    ratio, low, high = map(float, re.search(r"\| ([0-9.]+) \[([0-9.]+)–([0-9.]+)\]", rows[0]).groups())
    assert ratio == pytest.approx(expected, abs=5e-4) and low <= ratio <= high and high < 1
    assert (report / "real_vs_synthetic.png").read_bytes().startswith(PNG_MAGIC)
    assert 'src="real_vs_synthetic.png"' in (report / "index.html").read_text()
    only_synthetic = _study(tmp_path / "none", runs[:7])
    assert "Real ÷ synthetic" not in (only_synthetic / "README.md").read_text()
    assert not (only_synthetic / "real_vs_synthetic.png").exists()


def test_strategies_get_their_own_tables_and_the_auto_baseline(tmp_path):
    """A non-auto strategy is a configuration of its own (own table, own id) whose speedup is against the auto 1x1
    run; its unsupported 1x1 run does not replace that baseline; the read-back strategy reaches the records."""
    runs = [dict(topology="1x1", repeat=i, throughput=100.0, strategy_in_effect="none (one rank)") for i in (1, 2, 3)]
    runs += [
        dict(topology="1x2", repeat=i, throughput=180.0, strategy_in_effect="DDP over gloo, 25 MiB") for i in (1, 2, 3)
    ]
    runs += [
        dict(
            topology="1x2",
            repeat=i,
            throughput=150.0,
            strategy="ddp_fp16",
            strategy_in_effect="DDP over gloo, 25 MiB, comm hook fp16_compress_hook",
        )
        for i in (1, 2, 3)
    ]
    runs += [
        dict(
            topology="1x1",
            repeat=1,
            throughput=None,
            status="unsupported",
            strategy="ddp_fp16",
            error="strategy 'ddp_fp16' exchanges gradients between ranks and this run has one",
        )
    ]
    report = _study(tmp_path, runs)
    summary = pd.read_csv(report / "summary.csv").set_index("config_id")
    fp16 = summary.loc["resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic-via_ddp_fp16"]
    assert fp16["strategy"] == "ddp_fp16" and fp16["speedup"] == pytest.approx(1.5)
    assert fp16["strategy_in_effect"].endswith("fp16_compress_hook")
    assert summary.loc["resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic", "speedup"] == pytest.approx(1.8)
    records = pd.read_csv(report / "records.csv")
    assert set(records["strategy"]) == {"auto", "ddp_fp16"}
    readme = (report / "README.md").read_text()
    assert "· strategy ddp_fp16" in readme and "exchanges gradients between ranks" in readme


def test_the_compiler_label_says_what_ran_and_a_failed_table_keeps_its_units(tmp_path):
    """JAX's step is always compiled (jax.jit): with compiler off its heading, Compiler column, headline and the
    note say so (the registry's words), beside PyTorch's eager step. A table whose only cell is `unsupported` is in
    its model's unit, not samples/s."""
    runs = [
        dict(framework=fw, repeat=i, throughput=t) for fw, t in (("pytorch", 100.0), ("jax", 120.0)) for i in (1, 2)
    ]
    why = "JAX always compiles: its compiler off is the XLA-compiled step"
    runs += [dict(framework="jax", compiler=True, throughput=None, status="unsupported", error=why)]
    runs += [dict(model="bert_base", throughput=None, status="unsupported", error="no BERT here")]
    report = _study(tmp_path, runs)
    readme = (report / "README.md").read_text()
    headings = [line for line in readme.splitlines() if line.startswith(("### resnet50", "### bert_base"))]
    assert (
        "### resnet50 · fp32 · batch 32/device · jax compiled (XLA jit), pytorch eager · synthetic data · 224×224 px"
        in (headings)
    )
    assert "### resnet50 · fp32 · batch 32/device · compiled · synthetic data · 224×224 px" in headings
    bert = readme.split(next(h for h in headings if h.startswith("### bert_base")))[1].split("###")[0]
    assert "Throughput in sequences/s" in bert and "samples/s" not in bert
    what_ran = readme.split("### What ran")[1].split("###")[0]
    for config, label in (
        ("resnet50/jax/1x1/bs32-fp32-nocompile-synthetic", "compiled (XLA jit)"),
        ("resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic", "eager"),
        ("resnet50/jax/1x1/bs32-fp32-compile-synthetic", "compiled"),
    ):
        assert re.search(rf"^\| {re.escape(config)} +\|( [^|]+ \|){{6}} {re.escape(label)} +\|", what_ran, re.M)
    headline = next(line for line in readme.splitlines() if line.startswith("| jax "))
    assert "compiled (XLA jit)" in headline
    note = next(line for line in readme.splitlines() if "Compiler on means" in line)
    assert "Off: eager / imperative execution, except JAX: compiled (XLA jit)" in note
    assert "already" not in note.split("Off:")[1]  # said once, not contradicted


def test_bert_notes_survive_a_sequence_length_without_masked_positions():
    """An import's labels may give seq_length alone: the notes say so instead of failing the report."""
    from dlbench.collect.records import FIELDS
    from dlbench.report.notes import caveats

    records = pd.DataFrame(
        [
            {
                **dict.fromkeys(FIELDS),
                "framework": "pytorch",
                "model": "bert_base",
                "compiler": False,
                "seq_length": 128,
                "warmup_steps": 10,
                "measured_steps": 100,
                "device_name": "NVIDIA A100-SXM4-80GB",
            }
        ]
    )
    notes = " ".join(caveats(records))
    assert "bert_base at 128 tokens with masked positions not recorded" in notes


def _tables(html: str) -> list[tuple[str, list[str]]]:
    """(class attribute, header cells of the first header row) of every table in a page."""
    out = []
    for match in re.finditer(r"<table([^>]*)>(.*?)</table>", html, re.S):
        first_row = re.search(r"<tr>(.*?)</tr>", match.group(2), re.S)
        out.append((match.group(1), re.findall(r"<th[^>]*>(.*?)</th>", first_row.group(1) if first_row else "", re.S)))
    return out


def test_the_first_screen_answers_and_every_table_fits(tmp_path):
    """Three repeats everywhere (the study-wide condition), two models with different step counts, real and
    synthetic data, 1x1 and 1x2: the page opens with the hardware, what was measured and the headline table; the
    condition is said once, not on every cell; a flag names itself; no interval is printed from 3 repeats; the notes
    name their models; the throughput tables have a fixed, small number of columns; the plot encodes the data axis."""
    runs = []
    for data, scale in (("synthetic", 1.0), ("real", 0.6)):
        for topology, gain in (("1x1", 1.0), ("1x2", 1.8)):  # 90% scaling efficiency
            for repeat, jitter in enumerate((1.0, 1.01, 0.99), start=1):
                spread = 3.0 if (data, topology, repeat) == ("real", "1x2", 3) else 1.0  # one wide spread
                throughput = 100.0 * gain * scale * jitter * spread
                runs.append(dict(data=data, topology=topology, repeat=repeat, throughput=throughput, image_size=64))
    for repeat in (1, 2, 3):
        runs.append(dict(model="bert_tiny", repeat=repeat, throughput=1.2, warmup_steps=1, measured_steps=3))
    report = _study(tmp_path, runs)
    html = (report / "index.html").read_text()
    body = html.split("<body>", 1)[1]

    # The first section after the title: hardware (CPU model, logical CPUs, memory, OS), what was measured, the
    # headline table; the notes and the detailed tables after it.
    first = body.split('<section id="summary">', 1)[1].split("</section>", 1)[0]
    assert body.index('<section id="summary">') < body.index("<h2")
    assert re.search(r"Hardware:</strong> 1 node: Test CPU, 64 logical CPUs, 512 GiB memory, Test OS 1 \(6\.1\)", first)
    assert "Test GPU per node" in first
    assert "Measured:</strong> training throughput of bert_tiny, resnet50 with pytorch" in first
    headline = _tables(first)
    assert [cols for _, cols in headline] == [
        ["Framework", "Model", "Best throughput", "At", "Scaling efficiency", "Flags"]
    ]
    resnet = re.search(r"<tr><td[^>]*>pytorch</td><td[^>]*>resnet50</td>(.*?)</tr>", first, re.S).group(1)
    assert "180.0 images/s" in resnet and "1x2, fp32, bs 32, synthetic data" in resnet and "90% at 1x2" in resnet
    assert "wide spread" in resnet and "few repeats" not in resnet  # only the flag that matters here

    # Few repeats everywhere: said once, on the first screen; no cell carries it, no "(n=3)" on every cell.
    assert first.count("at most 3 ok repeats") == 1 and html.count("at most 3 ok repeats") == 1
    assert "(n=3)" not in html and "⚑ few repeats" not in html
    # A flag names itself where it stands, and stands only where it applies.
    assert len(re.findall(r"<td[^>]*>⚑ wide spread</td>", html)) == 1
    assert '<td class="text flag"></td>' in html
    # No interval from 3 repeats: speedups and efficiencies plain.
    assert not re.search(r"×\s*\[", html) and not re.search(r"%\s*\[[0-9]", html)
    assert re.search(r"<td[^>]*>1\.80×</td>", html)
    pairs = html.split('id="real-vs-synthetic"', 1)[1].split("<h2", 1)[0]  # real ÷ synthetic: the ratio alone
    assert not re.search(r"[0-9] \[[0-9]", pairs) and "no interval: 3 and 3 ok repeats" in pairs

    # Every notes line that states steps names its model.
    notes = re.findall(r"<li>([^<]*steps timed[^<]*)</li>", html)
    assert sorted(notes) == [
        "bert_tiny (pytorch): 1 warm-up step skipped, 3 steps timed per run.",
        "resnet50 (pytorch): 2 warm-up steps skipped, 10 steps timed per run.",
    ]

    # Every column visible at 1,400 px: throughput tables have seven columns whatever the frameworks; the details
    # are three tables keyed by Config that hold every summary column between them.
    tables = _tables(html)
    throughput_tables = [cols for attrs, cols in tables if "dlperf" in attrs]
    assert len(throughput_tables) == 3  # bert; resnet on real data; resnet on synthetic data
    assert all(len(cols) == 7 for cols in throughput_tables)
    assert all(len(cols) <= 12 for attrs, cols in tables if "details" not in attrs)
    details = [cols for attrs, cols in tables if "details" in attrs]
    assert len(details) == 3 and all(cols[0] == "Config" and len(cols) <= 18 for cols in details)
    assert {"Median", "IQR", "Flags", "Statuses", "Input"} <= {c for cols in details for c in cols}

    # The throughput plot: one line style per data kind (two pytorch resnet50 lines that differ only in data
    # must not look the same), and no interval bars promised where none is drawn.
    from dlbench.report.plots import plot_data, variant_labels

    summary = pd.read_csv(tmp_path / "agg" / "summary.csv")  # image size and sequence length differ by model only
    assert sorted(set(variant_labels(plot_data(summary, "median")))) == ["real data", "synthetic data"]
    assert (report / "throughput.png").read_bytes().startswith(PNG_MAGIC)


def test_the_hardware_line_counts_every_node_and_describes_those_a_header_does():
    """A run's header describes the node its supervisor ran on: a two-node run names two hosts but describes
    one. The line counts both and says which it cannot describe, never '1 node'."""
    machine = {"cpu_model": "Test CPU", "cpu_count": 8, "memory_bytes": 16 * 2**30, "os": "Test OS"}
    records = pd.DataFrame({"cpu_model": ["Test CPU"], "device_name": ["Test CPU"], "devices_per_node": [1]})
    two = hardware_line({"hosts": ["n1", "n2"], "machines": {"n1": machine}}, records)
    assert two.startswith("1 node: Test CPU, 8 logical CPUs, 16 GiB memory, Test OS; 1 more node not described")
    both = hardware_line({"hosts": ["n1", "n2"], "machines": {"n1": machine, "n2": machine}}, records)
    assert both.startswith("2 nodes: Test CPU, 8 logical CPUs") and "not described" not in both
    assert "accelerators: none (runs on CPU)" in both
