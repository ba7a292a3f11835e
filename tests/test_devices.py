"""GPU peaks for MFU (dlbench.vocabulary.devices, workflow/references/device_peaks.yaml): every device name maps to
exactly one entry, the run's math picks the peak, an unknown device has no MFU, and MFU reaches the summary and the
report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, harness_env, jobs_of, snakemake, tiny_config, write_config
from dlbench.collect.aggregate import summarise, write_all
from dlbench.harness import sysinfo
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.logformats.runlogs import parse as parse_run_log
from dlbench.plan import plan
from dlbench.plan.study import load_study
from dlbench.report import render_report
from dlbench.vocabulary import devices

# The names frameworks report (torch.cuda.get_device_name; TensorFlow's device details give the same) -> the entry.
EXPECTED = {
    "Tesla V100-SXM2-16GB": "V100 SXM2",
    "Tesla V100-SXM2-32GB": "V100 SXM2",
    "Tesla V100-PCIE-16GB": "V100 PCIe",
    "Tesla V100-PCIE-32GB": "V100 PCIe",
    "Tesla V100S-PCIE-32GB": "V100S PCIe",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA GH200 480GB": "GH200",  # Grace Hopper: not the H200 it contains the letters of
    "NVIDIA GH200 144G HBM3e": "GH200",
    "NVIDIA L40S": "L40S",
    "NVIDIA B200": "B200",
}
# Names no entry may claim: CPUs, unlisted GPUs, and parts whose names contain a listed one.
UNLISTED = [
    "AMD EPYC 9B45",
    "Intel(R) Xeon(R) Platinum 8480C",
    "Test CPU",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA L40",
    "NVIDIA GB200",
    "NVIDIA A10G",
    "Tesla T4",
]
H100 = "NVIDIA H100 80GB HBM3"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_every_example_name_matches_exactly_its_entry():
    table = devices.load_table()
    listed = {example: d.name for d in table for example in d.examples}
    assert set(EXPECTED) <= set(listed), "an expected name is not among the table's examples"
    for name, entry in {**listed, **EXPECTED}.items():
        matched = [d.name for d in table if d.matches(name)]
        assert matched == [entry], f"{name!r} matches {matched}, expected [{entry!r}]"
        assert devices.find_device(name).name == entry
    for name in UNLISTED:
        assert devices.find_device(name) is None, name


def test_the_table_holds_dense_datasheet_figures():
    table = {d.name: d for d in devices.load_table()}
    assert table["H100 SXM"].peaks == {"fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}
    assert table["H200 SXM"].peaks == table["H100 SXM"].peaks
    assert table["H100 PCIe"].peaks == {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756}
    for name in ("A100 SXM4 40GB", "A100 SXM4 80GB", "A100 PCIe 40GB", "A100 PCIe 80GB"):
        assert table[name].peaks == {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}
    assert table["L40S"].peaks == {"fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05}
    for name, fp32, fp16 in (("V100 SXM2", 15.7, 125), ("V100 PCIe", 14, 112), ("V100S PCIe", 16.4, 130)):
        assert table[name].peaks == {"fp32": fp32, "tf32": None, "bf16": None, "fp16": fp16}  # Volta: no TF32/BF16
    for device in table.values():
        assert device.datasheet and "http" in device.datasheet and device.examples
        known = {k: v for k, v in device.peaks.items() if v is not None}
        assert all(v > 0 for v in known.values())
        if "tf32" in known and "fp16" in known:  # dense TF32 is half the dense FP16 rate, never the sparse figure
            assert known["tf32"] <= known["fp16"] / 2 * 1.02  # L40S: 183 against 362.05
        if not known:  # unconfirmed figures are null, and the note says why
            assert "not confirmed" in device.note


def test_a_name_two_entries_match_is_an_error_in_the_table(tmp_path):
    base = (Path(devices.PEAKS_PATH)).read_text()
    clash = (
        base
        + """
  - name: Any H100
    patterns: ['H100']
    examples: []
    fp32: 1
    tf32: 1
    bf16: 1
    fp16: 1
    datasheet: "none, http://example.invalid"
"""
    )
    path = tmp_path / "device_peaks.yaml"
    path.write_text(clash)
    table = devices.load_table(path)
    with pytest.raises(devices.TableError, match="matches H100 SXM, Any H100"):
        devices.peak_tflops(H100, "amp", table=table)


@pytest.mark.parametrize(
    ("precision", "tf32", "amp_dtype", "expected"),
    [
        ("amp", None, "bfloat16", 989.4),
        ("amp", None, "float16", 989.4),
        ("amp", None, None, 989.4),
        ("fp32", True, None, 494.7),
        ("fp32", False, None, 67.0),
        ("fp32", None, None, 494.7),
        ("tf32", None, None, 494.7),
        ("bf16", None, None, 989.4),
    ],
)
def test_precision_and_tf32_pick_the_peak(precision, tf32, amp_dtype, expected):
    peak, source = devices.peak_tflops(H100, precision, tf32, amp_dtype)
    assert peak == expected and "H100 SXM" in source and "datasheet" in source
    if precision == "fp32" and tf32 is None:
        assert "TF32 use not recorded" in source  # the higher peak, said
    if precision == "amp" and amp_dtype is None:
        assert "bf16 assumed" in source


def test_volta_has_no_tf32_or_bf16():
    assert devices.peak_tflops("Tesla V100-SXM2-32GB", "fp32", tf32=True)[0] == 15.7  # TF32 on: no effect on Volta
    assert devices.peak_tflops("Tesla V100-SXM2-32GB", "fp32", tf32=None)[0] == 15.7
    assert devices.peak_tflops("Tesla V100-SXM2-32GB", "amp")[0] == 125  # unknown dtype: fp16, the one it has
    peak, reason = devices.peak_tflops("Tesla V100-SXM2-32GB", "amp", amp_dtype="bf16")
    assert peak is None and "no bf16 peak" in reason


@pytest.mark.parametrize("name", ["AMD EPYC 9B45", "NVIDIA GeForce RTX 4090", "NVIDIA GB200"])
def test_an_unknown_device_has_no_peak_and_says_why(name):
    assert devices.peak_tflops(name, "amp") == (None, f"no peak known for device {name!r}")
    assert devices.peak_tflops(name, "fp32", tf32=True)[0] is None


def test_a_null_figure_gives_no_peak():
    peak, reason = devices.peak_tflops("NVIDIA H100 NVL", "amp", amp_dtype="bf16")
    assert peak is None and "H100 NVL" in reason and "not confirmed" in reason
    assert devices.peak_tflops(None, "amp") == (None, "no device name recorded")


def test_run_math_reads_the_environment_line():
    torch_cuda = {
        "device_type": "cuda",
        "amp_dtype": None,
        "settings": {"tf32_matmul": True, "tf32_cudnn": True, "cudnn_benchmark": True},
    }
    assert devices.run_math("fp32", torch_cuda) == "tf32"
    off = {**torch_cuda, "settings": {"tf32_matmul": False, "tf32_cudnn": False}}
    assert devices.run_math("fp32", off) == "fp32"
    assert devices.run_math("fp32", {**torch_cuda, "settings": {"tf32_matmul": False, "tf32_cudnn": True}}) == "tf32"
    assert devices.run_math("amp", {**torch_cuda, "amp_dtype": "float16"}) == "fp16"
    assert devices.run_math("amp", {"device_type": "cpu", "amp_dtype": "bfloat16"}) == "bf16"
    assert devices.run_math("fp32", {"device_type": "cpu", "settings": {"tf32_matmul": None}}) == "fp32"
    assert devices.run_math("fp32", {"device_type": "cuda", "settings": {"tf32": True}}) == "tf32"  # TensorFlow
    assert devices.run_math("fp32", {"device_type": "gpu", "settings": {}}) is None  # MXNet: not recorded
    assert devices.run_math("amp", {}) is None


# ---- aggregation and the report, on run logs written and parsed for real

FLOPS = 2e11  # model FLOPs per training sample: 1000 samples/s -> 200 TFLOP/s


def gpu_log(
    path: Path,
    *,
    device_name: str = H100,
    device_type: str = "cuda",
    settings: dict | None = None,
    amp_dtype: str | None = None,
    flops: float = FLOPS,
    **run,
) -> str:
    """A run log (run_log_fixtures.write_run_log) whose environment line names `device_name` with the backend's
    settings and amp dtype, and whose summary counts `flops` model FLOPs per sample."""
    write_run_log(path, **run)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line["type"] == "environment":
            line.update(
                device_name=device_name,
                device_type=device_type,
                amp_dtype=amp_dtype,
                settings=settings if settings is not None else {"tf32_matmul": True, "tf32_cudnn": True},
            )
        elif line["type"] == "summary" and line["status"] == "ok":
            line["train_flops_per_sample"] = flops
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    return str(path)


def summary_of(paths: list[str]) -> pd.DataFrame:
    return summarise(pd.DataFrame([parse_run_log(p) for p in paths])).set_index("config_id")


def test_mfu_per_device_against_the_runs_math(tmp_path):
    amp = [
        gpu_log(
            tmp_path / f"amp{i}.jsonl", precision="amp", amp_dtype="bfloat16", topology="1x2", repeat=i, throughput=t
        )
        for i, t in enumerate((990.0, 1000.0, 1010.0), start=1)
    ]
    fp32 = [gpu_log(tmp_path / "fp32.jsonl", precision="fp32", throughput=500.0)]
    fp32_off = [
        gpu_log(
            tmp_path / "off.jsonl",
            precision="fp32",
            batch_size=16,
            throughput=500.0,
            settings={"tf32_matmul": False, "tf32_cudnn": False},
        )
    ]
    record = parse_run_log(amp[0])
    assert record["math_dtype"] == "bf16" and record["device_name"] == H100
    summary = summary_of(amp + fp32 + fp32_off)
    row = summary.loc["resnet50/pytorch/1x2/bs32-amp-nocompile-synthetic"]
    assert row["tflops"] == pytest.approx(200.0)  # all devices together
    assert row["peak_tflops"] == 989.4 and row["mfu"] == pytest.approx(200.0 / 2 / 989.4)  # per device
    assert "H100 SXM dense bf16 989.4" in row["mfu_note"]
    assert row["peak_memory_gb"] == pytest.approx(1.0)  # 2**30 bytes, the highest rank's
    tf32 = summary.loc["resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic"]
    assert tf32["peak_tflops"] == 494.7 and tf32["mfu"] == pytest.approx(100.0 / 494.7)
    plain = summary.loc["resnet50/pytorch/1x1/bs16-fp32-nocompile-synthetic"]
    assert plain["peak_tflops"] == 67 and plain["mfu"] == pytest.approx(100.0 / 67)
    assert "mfu_above_peak" in plain["flags"]  # 1.49 > 1: flagged, not a finding
    assert "mfu_above_peak" not in (row["flags"] or "")


def test_no_mfu_on_a_cpu_an_unknown_gpu_or_mixed_devices(tmp_path):
    cpu = [gpu_log(tmp_path / "cpu.jsonl", device_name="AMD EPYC 9B45", device_type="cpu", settings={})]
    mixed = [
        gpu_log(tmp_path / "m1.jsonl", topology="1x2", repeat=1),
        gpu_log(tmp_path / "m2.jsonl", topology="1x2", repeat=2, device_name="NVIDIA A100-SXM4-80GB"),
    ]
    summary = summary_of(cpu + mixed)
    row = summary.loc["resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic"]
    assert pd.isna(row["mfu"]) and pd.isna(row["peak_tflops"]) and row["tflops"] == pytest.approx(20.0)
    assert row["mfu_note"] == "no peak known for device 'AMD EPYC 9B45'"
    assert row["peak_memory_gb"] == pytest.approx(1.0)  # the CPU's: the rank's peak resident set
    two = summary.loc["resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic"]
    assert pd.isna(two["mfu"]) and two["mfu_note"].startswith("mixed devices (NVIDIA A100-SXM4-80GB; NVIDIA H100")


def _report(root: Path, logs: list[str], cpu_peak_paths: list[str] = ()) -> tuple[str, str]:
    agg = root / "agg"
    agg.mkdir(parents=True)
    write_all(
        logs,
        [],
        {"study": "mfu", "report": {"confidence": 0.95}},
        agg / "records.csv",
        agg / "summary.csv",
        agg / "environment.json",
        cpu_peak_paths=cpu_peak_paths,
    )
    render_report(agg / "records.csv", agg / "summary.csv", agg / "environment.json", root / "report")
    return (root / "report/index.html").read_text(), (root / "report/README.md").read_text()


def test_the_report_shows_mfu_for_gpu_runs_only(tmp_path):
    gpu = [
        gpu_log(tmp_path / f"g{i}.jsonl", precision="amp", amp_dtype="bfloat16", repeat=i, throughput=1000.0)
        for i in (1, 2, 3)
    ]
    html, readme = _report(tmp_path / "gpu", gpu)
    assert re.search(r"<th>MFU</th>", html) and re.search(r"<th>Peak memory/rank \(GiB\)</th>", html)
    details = readme.split("### Throughput statistics")[1].split("\n#")[0]
    header, _, row = details.strip().splitlines()[:3]
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")], strict=True))
    assert cells["MFU"] == f"{200.0 / 989.4:.1%}" and cells["Peak TFLOP/s"] == "989.4"
    assert cells["Peak memory/rank (GiB)"] == "1.00"
    assert "Peak for MFU: NVIDIA H100 80GB HBM3: H100 SXM: dense fp32 67, tf32 494.7" in readme
    assert "MFU = achieved model TFLOP/s per device" in readme and "H100 SXM dense bf16 989.4" in readme

    cpu = [
        gpu_log(tmp_path / f"c{i}.jsonl", device_name="Test CPU", device_type="cpu", settings={}, repeat=i)
        for i in (1, 2, 3)
    ]
    html, readme = _report(tmp_path / "cpu", cpu)
    assert "<th>MFU</th>" not in html and "| MFU " not in readme and "Peak for MFU" not in readme
    assert "<th>Peak memory/rank (GiB)</th>" in html  # the CPU's memory is a value: shown


# ---- a CPU's peak, measured on the machine (dlbench.harness.peak, platform.cpu_peak: measure)


def measured(
    cpu: str, library: str, gflops: float | None, reason: str | None = None, bf16: float | None = None
) -> dict:
    """A record as dlbench.harness.peak writes it (bf16: its bf16 figure; None: a record from before bf16 was
    measured, which has no bf16 keys)."""
    record = {
        "cpu": cpu,
        "host": "node1",
        "library": library,
        "threads": 2,
        "n": 2048,
        "busy_before": 0.02,
        "date": "2026-11-28T18:00:00+00:00",
        "gflops": gflops,
        "reason": reason,
    }
    return record | ({"bf16_gflops": bf16, "bf16_reason": None} if bf16 is not None else {})


BUSY = "the machine stayed busy (97% of its CPU time used by others over 2 s after 120 s of waiting)"


def test_a_measured_cpu_peak_gives_mfu_per_node_against_the_highest_library(tmp_path):
    """The CPU's entry takes the highest library's figure; MFU divides by nodes (a node's peak is every core's),
    so 1x1 and 1x2 at the same achieved FLOP/s read the same MFU; a CPU whose measurement was refused says why."""
    one = [gpu_log(tmp_path / "c1.jsonl", device_name="Test CPU", device_type="cpu", settings={})]
    two = [gpu_log(tmp_path / "c2.jsonl", device_name="Test CPU", device_type="cpu", settings={}, topology="1x2")]
    other = [gpu_log(tmp_path / "o.jsonl", device_name="Other CPU", device_type="cpu", settings={}, batch_size=8)]
    peaks = devices.with_measured_cpus(
        [
            measured("Test CPU", "numpy", 50.0),
            measured("Test CPU", "pytorch", 160.0),
            measured("Other CPU", "jax", None, BUSY),
        ]
    )
    records = pd.DataFrame([parse_run_log(p) for p in one + two + other])
    summary = summarise(records, peaks=peaks).set_index("config_id")
    single = summary.loc["resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic"]
    assert single["tflops"] == pytest.approx(20.0) and single["peak_tflops"] == pytest.approx(0.16)
    assert single["mfu"] == pytest.approx(20.0 / 0.16)  # 125: the log's made-up FLOPs, flagged as above the peak
    assert "mfu_above_peak" in single["flags"]
    assert single["mfu_note"].startswith("Test CPU dense fp32 0.16 TFLOP/s (measured: fp32 GEMM in pytorch, 2 threads")
    pair = summary.loc["resnet50/pytorch/1x2/bs32-fp32-nocompile-synthetic"]
    assert pair["mfu"] == pytest.approx(pair["tflops"] / 1 / 0.16)  # one node: its peak, not a rank's
    refused = summary.loc["resnet50/pytorch/1x1/bs8-fp32-nocompile-synthetic"]
    assert pd.isna(refused["mfu"]) and f"not measured: {BUSY}" in refused["mfu_note"]
    # without measured peaks a CPU has none, as before
    assert pd.isna(summarise(records).set_index("config_id").loc[single.name, "mfu"])


def test_an_amp_run_on_a_cpu_is_measured_against_the_bf16_peak(tmp_path):
    """AMP on a CPU multiplies in bf16 (autocast): its MFU is against the highest bf16 GEMM of any library, not the
    fp32 one (bf16 on AMX runs several times faster); where no bf16 figure was measured it has none and says so."""
    amp = [
        gpu_log(
            tmp_path / "a.jsonl",
            device_name="Test CPU",
            device_type="cpu",
            settings={},
            precision="amp",
            amp_dtype="bfloat16",
            flops=1e9,
        )
    ]
    fp32 = [gpu_log(tmp_path / "f.jsonl", device_name="Test CPU", device_type="cpu", settings={}, flops=1e9)]
    peaks = devices.with_measured_cpus(
        [
            measured("Test CPU", "numpy", 300.0),  # numpy: fp32 only, the fp32 peak
            measured("Test CPU", "pytorch", 250.0, bf16=800.0),
            measured("Test CPU", "mxnet", 60.0, bf16=20.0),
        ]
    )
    records = pd.DataFrame([parse_run_log(p) for p in amp + fp32])
    summary = summarise(records, peaks=peaks).set_index("precision")
    assert summary.loc["amp", "peak_tflops"] == pytest.approx(0.8)
    assert summary.loc["amp", "mfu"] == pytest.approx(summary.loc["amp", "tflops"] / 0.8)
    assert (
        "dense bf16 0.8 TFLOP/s (measured: fp32 GEMM in numpy, bf16 GEMM in pytorch" in summary.loc["amp", "mfu_note"]
    )
    assert summary.loc["fp32", "peak_tflops"] == pytest.approx(0.3)
    # peaks measured before bf16 was: fp32 runs keep their MFU, AMP runs have none and say why
    old = summarise(records, peaks=devices.with_measured_cpus([measured("Test CPU", "pytorch", 250.0)]))
    old = old.set_index("precision")
    assert (
        pd.isna(old.loc["amp", "mfu"])
        and "no bf16 peak known for Test CPU (bf16 not measured" in old.loc["amp", "mfu_note"]
    )
    assert old.loc["fp32", "mfu"] == pytest.approx(old.loc["fp32", "tflops"] / 0.25)


def test_the_report_shows_a_measured_cpu_peak_and_its_mfu(tmp_path):
    logs = [
        gpu_log(tmp_path / f"c{i}.jsonl", device_name="Test CPU", device_type="cpu", settings={}, repeat=i, flops=1e9)
        for i in (1, 2, 3)
    ]
    peak_file = tmp_path / "pytorch.json"
    peak_file.write_text(json.dumps(measured("Test CPU", "pytorch", 160.0)))
    html, readme = _report(tmp_path / "cpu", logs, cpu_peak_paths=[str(peak_file)])
    assert "<th>MFU</th>" in html
    assert "Peak for MFU: Test CPU: dense fp32 0.16 TFLOP/s (measured: fp32 GEMM in pytorch" in readme
    environment = json.loads((tmp_path / "cpu" / "agg" / "environment.json").read_text())
    assert environment["cpu_peaks"] == [measured("Test CPU", "pytorch", 160.0)]


def test_the_peak_is_measured_on_a_quiet_machine_and_refused_on_a_busy_one(tmp_path):
    """dlbench.harness.peak for real (numpy's GEMM in this environment): a figure with the CPU as runs name it;
    with every core taken by spinning processes it records no figure and says why."""
    out = tmp_path / "numpy.json"
    command = [sys.executable, "-m", "dlbench.harness.peak", "--library", "numpy", "--n", "256", "--out"]
    # any load allowed: what the suite's other workers do must not decide this test
    done = subprocess.run(
        [*command, str(out), "--quiet", "1", "--wait", "0"], env=harness_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["gflops"] > 0 and record["reason"] is None and record["library"] == "numpy"
    assert record["cpu"] == sysinfo.cpu_model() and record["threads"] == len(sysinfo.usable_cpus())
    assert f"numpy fp32 GEMM peak on {record['cpu']}" in done.stdout
    assert record["bf16_gflops"] is None and record["bf16_reason"] == "numpy has no bfloat16 type"  # said, not 0

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in sysinfo.usable_cpus()]
    try:
        busy = subprocess.run(
            [*command, str(out), "--quiet", "0.5", "--wait", "1"], env=harness_env(), capture_output=True, text=True
        )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert busy.returncode == 0, busy.stderr
    record = json.loads(out.read_text())
    assert record["gflops"] is None and "the machine stayed busy" in record["reason"], record
    assert record["busy_before"] > 0.5 and "no figure: the machine stayed busy" in busy.stdout


def test_a_study_that_asks_measures_one_peak_per_framework_before_the_aggregate(tmp_path):
    config = tiny_config(platform={"cpu_peak": "measure"})
    config["include"] = [{"framework": "jax", "model": "resnet_tiny", "topology": "1x1", "batch_size": 2}]
    dry = snakemake(tmp_path, "-n", "-p", "--configfile", str(write_config(tmp_path / "study.yaml", config)))
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = jobs_of(dry.stdout + dry.stderr)
    peaks = sorted(output for rule, output in jobs if rule == "cpu_peak")
    assert peaks == ["results/machine/cpu_peak/jax.json", "results/machine/cpu_peak/pytorch.json"]
    assert ("aggregate", "results/aggregate/records.csv") in jobs
    # each in its framework's own environment (the default build's), the library named
    command = "bin/python -m dlbench.harness.peak --library jax --out results/machine/cpu_peak/jax.json"
    assert command in dry.stdout + dry.stderr
    # on a GPU study nothing is measured
    gpu = load_study(tiny_config(platform={"cpu_peak": "measure", "device": "cuda"}), SCHEMA, REPO / "envs", REPO)
    assert plan.Plan(gpu).cpu_peaks() == []
