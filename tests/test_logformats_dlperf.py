"""DLPerf log trees written here: DLPerf's window rule on OneFlow, DLLogger and pytorch/examples lines; the
median over repeats in aggregation."""

from __future__ import annotations

import pytest

from dlbench.collect.aggregate import summarise
from dlbench.collect.records import FIELDS
from dlbench.logformats import dlperf
from dlbench.logformats.external_log_fixtures import write_dllogger, write_oneflow


def oneflow_times(seconds_per_iter: float, last: int = 140, every: int = 20, first: int = 0) -> dict[int, float]:
    return {i: 1_597_933_942.0 + i * seconds_per_iter for i in range(first, last + 1, every)}


def test_oneflow_tree_and_the_median_over_repeats(tmp_path):
    paths = [
        write_oneflow(tmp_path / f"logs/oneflow/bz128/1n8g/rn50_b128_fp32_{rep}.log", times=oneflow_times(s))
        for rep, s in enumerate((0.25, 0.20, 0.50), start=1)
    ]
    records = [dlperf.parse(p) for p in paths]
    assert [r["throughput"] for r in records] == pytest.approx([128 * 8 * 100 / (100 * s) for s in (0.25, 0.2, 0.5)])
    first = records[0]
    assert (
        first["framework"],
        first["model"],
        first["topology"],
        first["batch_size"],
        first["precision"],
        first["repeat"],
        first["warmup_steps"],
        first["measured_steps"],
    ) == ("oneflow", "resnet50", "1x8", 128, "fp32", 1, 20, 100)
    assert first["run_id"] == "resnet50/oneflow/1x8/bs128-fp32/rep1" and first["elapsed_s"] == pytest.approx(25.0)
    import pandas as pd

    summary = summarise(pd.DataFrame(records, columns=FIELDS))
    assert len(summary) == 1 and summary["median"].iloc[0] == pytest.approx(1024 / 0.25)


def test_oneflow_bert_steps_use_the_19_to_119_window_and_headers(tmp_path):
    path = write_oneflow(
        tmp_path / "bert/4n8g/r2.log",
        times=oneflow_times(0.5, last=139, first=19),
        bert=True,
        batch_per_device=32,
        gpus=8,
        nodes=4,
    )
    record = dlperf.parse(path, {"framework": "oneflow", "precision": "amp"})
    assert record["throughput"] == pytest.approx(32 * 32 * 100 / 50) and record["unit"] == "sequences/s"
    assert (record["topology"], record["model"], record["repeat"]) == ("4x8", "bert_base", 2)
    assert "19..119" in record["throughput_definition"]


def test_ten_or_more_nodes_and_window_labels(tmp_path):
    path = write_oneflow(
        tmp_path / "oneflow/16n8g/rn50_b64_amp_1.log", times=oneflow_times(0.1, every=10), batch_per_device=None
    )
    record = dlperf.parse(path, {"start_iter": 30, "end_iter": 130})
    assert record["topology"] == "16x8" and record["precision"] == "amp"
    assert record["throughput"] == pytest.approx(64 * 128 * 100 / 10)


def test_dllogger_lines_in_a_dlperf_tree(tmp_path):
    path = write_dllogger(
        tmp_path / "ngc_pytorch/bz256/1n8g/rn50_b256_amp_3.log", values=[1.0] * 130, seconds_per_step=0.5
    )
    record = dlperf.parse(path)
    # iterations 20..120 logged 0.5 s apart: 256 x 8 x 100 / 50 s, whatever the per-step figures say
    assert record["throughput"] == pytest.approx(256 * 8 * 100 / 50)
    assert record["framework"] == "ngc_pytorch" and record["throughput_reported"] == 100.0
    assert record["repeat"] == 3


def test_pytorch_examples_lines_add_up_step_times(tmp_path):
    path = tmp_path / "pytorch/bz128/1n1g/rn50_b128_fp32_1.log"
    path.parent.mkdir(parents=True)
    path.write_text(
        "".join(
            f"Epoch: [0][{i:>4}/5005]\tTime  {0.4 if i <= 20 else 0.25:.3f} ( 0.300)\tData  0.001\n"
            for i in range(0, 130)
        )
    )
    record = dlperf.parse(path)
    assert record["throughput"] == pytest.approx(128 * 100 / 25.0)


def test_runs_dlperfs_rule_cannot_time_are_error_records(tmp_path):
    short = write_oneflow(tmp_path / "oneflow/bz128/1n1g/rn50_b128_fp32_1.log", times=oneflow_times(0.2, last=100))
    record = dlperf.parse(short)
    assert (
        record["status"] == "error"
        and f"{short}:" in record["error"]
        and "iteration 120 is not logged" in record["error"]
    )
    assert record["config_id"] == "resnet50/oneflow/1x1/bs128-fp32"
    nobatch = write_oneflow(tmp_path / "oneflow/1n1g/x_1.log", times=oneflow_times(0.2), batch_per_device=None)
    assert "batch size per device or device count unknown" in dlperf.parse(nobatch)["error"]
    other = tmp_path / "tf2/bz128/1n1g/rn50_b128_fp32_1.log"
    other.parent.mkdir(parents=True)
    other.write_text("I1001 TimeHistory: 2.5 seconds, 51.2 examples/second between steps 0 and 100\n")
    assert "no line DLPerf's rule can time" in dlperf.parse(other)["error"]
