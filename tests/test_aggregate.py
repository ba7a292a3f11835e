"""Parse and aggregate on fixture logs with known results."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dlbench.collect.aggregate import _median, summarise, write_all
from dlbench.harness.runlog import TAIL_BLOCK, last_line_type
from dlbench.logformats.run_log_fixtures import write_run_log
from dlbench.logformats.runlogs import _json_line
from dlbench.logformats.runlogs import parse as parse_run_log


def logs_for(tmp_path, topology, throughputs, **kwargs):
    paths = []
    for rep, value in enumerate(throughputs, start=1):
        path = tmp_path / f"results/runs/resnet50/pytorch/{topology}/x/rep{rep}.jsonl"
        path = path.with_name(f"{kwargs.get('precision', 'fp32')}-{topology}-rep{rep}.jsonl")
        if isinstance(value, str):
            paths.append(
                write_run_log(
                    path,
                    topology=topology,
                    repeat=rep,
                    status=value,
                    throughput=None,
                    error=f"{value} in rep {rep}",
                    **kwargs,
                )
            )
        else:
            paths.append(write_run_log(path, topology=topology, repeat=rep, throughput=value, **kwargs))
    return [str(p) for p in paths]


def test_record_of_a_run(tmp_path):
    path = write_run_log(tmp_path / "a.jsonl", topology="2x8", batch_size=64, throughput=12345.0)
    record = parse_run_log(path)
    assert record["status"] == "ok"
    assert record["throughput"] == pytest.approx(12345.0)
    assert (record["nodes"], record["devices_per_node"], record["devices"]) == (2, 8, 16)
    assert record["global_batch_size"] == 64 * 16
    assert record["run_id"] == "resnet50/pytorch/2x8/bs64-fp32-nocompile-synthetic/rep1"


def test_median_dispersion_speedup_efficiency(tmp_path):
    logs = (
        logs_for(tmp_path, "1x1", [100, 110, 90, 105, 95])
        + logs_for(tmp_path, "1x2", [190, 200, 210])
        + logs_for(tmp_path, "1x8", [700, "oom", 720])
    )
    records = pd.DataFrame([parse_run_log(p) for p in logs])
    summary = summarise(records).set_index("topology")
    one = summary.loc["1x1"]
    assert one["median"] == 100 and one["min"] == 90 and one["max"] == 110
    assert one["q25"] == 95 and one["q75"] == 105 and one["iqr"] == 10
    assert one["cv"] == pytest.approx(pd.Series([100, 110, 90, 105, 95]).std() / 100)
    assert summary.loc["1x2", "speedup"] == pytest.approx(2.0)
    assert summary.loc["1x2", "efficiency"] == pytest.approx(1.0)
    eight = summary.loc["1x8"]
    assert eight["median"] == pytest.approx(710) and eight["speedup"] == pytest.approx(7.1)
    assert eight["efficiency"] == pytest.approx(7.1 / 8)
    assert (eight["n_total"], eight["n_ok"], eight["n_failed"]) == (3, 2, 1)
    assert eight["statuses"] == "ok:2;oom:1" and "oom in rep 2" in eight["error"]


def test_failed_configuration_is_kept_and_has_no_speedup(tmp_path):
    logs = logs_for(tmp_path, "1x1", ["oom", "oom"]) + logs_for(tmp_path, "1x2", [50.0])
    summary = summarise(pd.DataFrame([parse_run_log(p) for p in logs])).set_index("topology")
    assert summary.loc["1x1", "statuses"] == "oom:2" and summary.loc["1x1", "n_ok"] == 0
    assert math.isnan(summary.loc["1x1", "median"])
    assert math.isnan(summary.loc["1x2", "speedup"])  # no 1x1 baseline: no speedup, not a wrong one


def test_speedup_compares_like_with_like(tmp_path):
    logs = (
        logs_for(tmp_path, "1x1", [100.0])
        + logs_for(tmp_path, "1x2", [150.0])
        + logs_for(tmp_path, "1x1", [300.0], precision="amp")
        + logs_for(tmp_path, "1x2", [600.0], precision="amp")
    )
    summary = summarise(pd.DataFrame([parse_run_log(p) for p in logs]))
    speedups = summary.set_index(["precision", "topology"])["speedup"]
    assert speedups[("fp32", "1x2")] == pytest.approx(1.5)
    assert speedups[("amp", "1x2")] == pytest.approx(2.0)


def test_amp_slower_than_its_fp32_twin_is_flagged_with_the_reason_the_device_gives(tmp_path):
    logs = (
        logs_for(tmp_path, "1x1", [100.0, 101.0, 99.0])
        + logs_for(tmp_path, "1x1", [6.0, 6.1, 5.9], precision="amp")
        + logs_for(tmp_path, "1x2", [190.0])
        + logs_for(tmp_path, "1x2", [380.0], precision="amp")
    )
    records = pd.DataFrame([parse_run_log(p) for p in logs])
    records["device_name"] = "AMD EPYC (family 25 model 1, AVX2)"  # as sysinfo.cpu_model names a Zen 3
    flags = summarise(records).set_index(["precision", "topology"])["flags"].fillna("")
    slower = flags[("amp", "1x1")]
    assert "amp_slower_than_fp32: AMP 6 against fp32 100 images/s (0.06x) otherwise alike" in slower
    assert "no native bf16 on this CPU" in slower and "(AMD EPYC (family 25 model 1, AVX2))" in slower
    assert all("amp_slower" not in flags[key] for key in [("amp", "1x2"), ("fp32", "1x1"), ("fp32", "1x2")])
    records["device_name"] = "AMD EPYC (family 25 model 17, AVX-512 BF16)"  # native bf16: the cause not known
    slower = summarise(records).set_index(["precision", "topology"]).loc[("amp", "1x1"), "flags"]
    assert "amp_slower_than_fp32" in slower and "no native bf16" not in slower


def test_interrupted_and_corrupt_logs_become_error_records(tmp_path):
    interrupted = write_run_log(
        tmp_path / "results/runs/resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic/rep1.jsonl", throughput=None
    )
    corrupt = tmp_path / "results/runs/resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic/rep2.jsonl"
    corrupt.write_text('{"type": "header"\n')
    one = parse_run_log(interrupted)
    assert one["status"] == "error" and "no summary line" in one["error"]
    two = parse_run_log(corrupt)
    assert two["status"] == "error"
    assert f"{corrupt}:1: not JSON" in two["error"]
    assert two["config_id"] == "resnet50/pytorch/1x1/bs32-fp32-nocompile-synthetic" and two["repeat"] == 2


@pytest.mark.parametrize(
    "line",
    [
        '{"type": "step", "seconds": 0.5}\n',
        '{"type": "step", "seconds": 0.5}',
        '  {"a": [1, 2]} \r\n',
        '{"a": NaN}\n',
        "\ufeff{}\n",
        '{"a": 1} {"b": 2}\n',
        '{"a": 1}x\n',
        '{"a": "unterminated\n',
        '{"type": "header"\n',
        "[1, 2]\n",
        "\n",
    ],
)
def test_a_log_line_is_read_as_json_loads_reads_it(line):
    """The run log's fast line reader gives json.loads' value, or its error word for word."""

    def read(decode):
        try:
            return decode(line)
        except ValueError as error:
            return str(error)

    assert repr(read(_json_line)) == repr(read(json.loads))


def test_summary_inconsistent_with_steps_is_flagged(tmp_path):
    path = write_run_log(tmp_path / "a.jsonl", throughput=100.0)
    lines = path.read_text().replace('"throughput":100.0', '"throughput":150.0')
    path.write_text(lines)
    record = parse_run_log(path)
    assert record["status"] == "error" and "disagrees with its step records" in record["error"]


def test_write_all_outputs(tmp_path):
    logs = logs_for(tmp_path, "1x1", [100.0, 120.0]) + logs_for(tmp_path, "1x2", ["timeout", 210.0])
    out = tmp_path / "agg"
    out.mkdir()
    write_all(logs, [], {"study": "t"}, out / "records.csv", out / "summary.csv", out / "environment.json")
    records = pd.read_csv(out / "records.csv")
    assert len(records) == 4 and sorted(records["status"]) == ["ok", "ok", "ok", "timeout"]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["median"]) == [110.0, 210.0]
    env = json.loads((out / "environment.json").read_text())
    assert env["hosts"] == ["node001"] and list(env["machines"]) == ["node001"]  # each host once


def test_bert_records_carry_their_inputs_and_speedups_stay_within_one_setting(tmp_path):
    """BERT records name sequence length, masked positions, optimizer and clipping (ResNet-50 ones none);
    a clipped run is never the baseline of an unclipped one."""

    def bert(topology, value, clip):
        path = tmp_path / f"{topology}-{clip}.jsonl"
        return str(
            write_run_log(path, model="bert_base", topology=topology, throughput=value, grad_clip=clip, seq_length=512)
        )

    logs = [bert("1x1", 10.0, False), bert("1x2", 15.0, False), bert("1x1", 8.0, True), bert("1x2", 16.0, True)]
    records = pd.DataFrame([parse_run_log(p) for p in logs])
    first = records.iloc[0]
    inputs = ("seq_length", "max_predictions", "optimizer", "grad_clip")
    assert tuple(first[k] for k in inputs) == (512, 80, "adam", False)
    assert first["image_size"] is None and first["unit"] == "sequences/s"
    assert first["config_id"] == "bert_base/pytorch/1x1/bs32-fp32-nocompile-synthetic-seq512-adam-noclip"
    speedups = summarise(records).set_index(["grad_clip", "topology"])["speedup"]
    assert speedups[(False, "1x2")] == pytest.approx(1.5) and speedups[(True, "1x2")] == pytest.approx(2.0)
    resnet = parse_run_log(write_run_log(tmp_path / "r.jsonl"))
    assert tuple(resnet[k] for k in inputs) == (None, None, None, None) and resnet["image_size"] == 224


def test_unreadable_bert_log_is_identified_from_its_path(tmp_path):
    path = tmp_path / "results/runs/bert_base/mxnet/1x2/bs4-amp-compile-synthetic-seq128-lamb-clip/rep3.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("not json\n")
    record = parse_run_log(path)
    assert record["status"] == "error" and record["repeat"] == 3 and record["devices"] == 2
    assert (record["seq_length"], record["max_predictions"], record["optimizer"], record["grad_clip"]) == (
        128,
        20,
        "lamb",
        True,
    )


def test_the_last_line_is_read_from_the_end_of_a_log(tmp_path):
    """Every Snakemake start asks each run log whether it ends in a summary (damaged logs are redone): a line
    longer than the block read from the end, a log without a final line break, a cut last line, no line."""
    log = tmp_path / "rep1.jsonl"
    big = {"type": "step", "pad": "x" * (3 * TAIL_BLOCK)}
    log.write_text(json.dumps({"type": "header"}) + "\n" + json.dumps(big) + "\n")
    assert last_line_type(log) == "step"
    log.write_text(json.dumps(big) + "\n" + json.dumps({"type": "summary"}))
    assert last_line_type(log) == "summary"
    log.write_text(json.dumps(big) + "\n" + json.dumps({"type": "summary"})[:-3] + "\n")
    assert last_line_type(log) is None
    log.write_text("")
    assert last_line_type(log) is None and last_line_type(tmp_path / "missing.jsonl") is None


def test_the_summary_statistics_are_pandas_own_bit_for_bit():
    """summarise computes on numpy arrays what it once asked pandas' Series for: the same floats, to the last bit
    (summary.csv's text stays the same)."""
    rng = np.random.default_rng(0)
    for n in range(1, 40):
        for x in (rng.lognormal(7, 1, n), np.round(rng.normal(1000, 5, n), 1)):  # spread; ties
            series = pd.Series(x)
            assert _median(x) == series.median()
            assert np.quantile(x, 0.25) == series.quantile(0.25) and np.quantile(x, 0.75) == series.quantile(0.75)
            if n > 1:
                assert np.std(x, ddof=1) / np.mean(x) == series.std(ddof=1) / series.mean()
