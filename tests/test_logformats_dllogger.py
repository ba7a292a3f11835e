"""DLLogger logs: the shared reference logs' MANIFEST figures (when present), including the published
PaddlePaddle/Perf figures through the import path's warm-up-skip labels; logs written here in both backends
and the five scripts' shapes (always), and interrupted or garbled logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlbench import logformats
from dlbench.logformats import dllogger
from dlbench.logformats.external_log_fixtures import SCRIPTS, write_dllogger


@pytest.fixture
def reference(external_logs):
    return external_logs / "dllogger"


def imported(path, **labels):
    """A record through the registry, as the workflow's import does."""
    return logformats.parse(path, source="dllogger", labels=labels)


def test_reference_pytorch_bert(reference):
    record = imported(reference / "ngc-pyt-bert-base_a100_1gpu_amp_bs128.log")
    assert record["throughput_reported"] == pytest.approx(1542.2967, abs=1e-4)  # published 1542.296
    assert record["throughput"] == record["throughput_reported"]  # no per-step throughput in this script
    assert "summary" in record["throughput_definition"] and record["unit"] == "sequences/s"
    assert record["batch_size"] == 128


def test_reference_tensorflow_bert(reference):
    path = reference / "ngc-tf-bert-base_a100_1gpu_fp32_bs128.log"
    steps = dllogger.series(path).steps
    assert len(steps) == 45 and (steps[0][0], steps[-1][0]) == ((2,), (46,))
    record = imported(path, statistic="mean_of_steps")
    assert record["throughput"] == pytest.approx(698.7684, abs=1e-4)  # published 698.768
    assert record["throughput_reported"] == pytest.approx(704.708)  # the summary line, not the published figure
    assert record["measured_steps"] == 45


def test_reference_pytorch_resnet50(reference):
    path = reference / "ngc-pyt-rn50_v100_8gpu_amp_bs256.log"
    record = imported(path)
    assert record["throughput_reported"] == pytest.approx(5793.51)
    assert record["throughput_reported_key"].startswith("train.total_ips (line ")
    assert dllogger.series(path, summary_key="train.compute_ips").summary == pytest.approx(5816.83)
    assert imported(path, statistic="mean_of_steps")["throughput"] == pytest.approx(5793.51, abs=0.01)  # all 63
    published = imported(path, skip_steps=8, statistic="mean_of_steps")
    assert published["throughput"] == pytest.approx(5889.05, abs=0.005)  # published 5889.05: iterations 9..63
    assert (published["warmup_steps"], published["measured_steps"]) == (8, 55)
    assert (record["topology"], record["batch_size"], record["precision"], record["model"]) == (
        "1x8",
        256,
        "amp",
        "resnet50",
    )
    assert record["config_id"] == "resnet50/dle-pytorch/1x8/bs256-amp"
    assert "harmonic mean" in record["throughput_definition"]
    assert record["throughput"] == pytest.approx(63 / sum(1 / v for _, v, _ in dllogger.series(path).steps))


def test_reference_tensorflow_resnet50(reference):
    path = reference / "ngc-tf-rn50_v100_8gpu_amp_bs256.log"
    record = imported(path)
    assert record["throughput_reported"] == pytest.approx(9421.3583, abs=1e-4)  # `() train_throughput`
    steps = dllogger.series(path).steps
    assert len(steps) == 30 and (steps[0][0], steps[-1][0]) == ((0, 200), (0, 490))
    assert imported(path, statistic="mean_of_steps")["throughput"] == pytest.approx(9408.8319, abs=1e-4)
    published = imported(path, skip_steps=5, statistic="mean_of_steps")  # steps 250..490
    assert published["throughput"] == pytest.approx(9405.36, abs=0.005)  # published 9405.36


def test_reference_mxnet_resnet50_reports_its_summary(reference):
    path = reference / "ngc-mx-rn50_v100_8gpu_amp_bs256.log"  # every line behind `[1,0]<stdout>:`
    record = imported(path, statistic="summary")
    # PaddlePaddle/Perf publishes 10336, which no simple rule reproduces from this log: we report Summary's.
    assert record["throughput"] == pytest.approx(10756.76, abs=0.005)
    assert imported(path)["throughput_reported"] == pytest.approx(10756.7649, abs=1e-4)
    assert json.loads(record["details"])["epoch_throughput"] == pytest.approx([11596.01, 10213.21, 10461.07], abs=0.005)
    assert (record["batch_size"], record["devices"], record["precision"]) == (256, 8, "amp")  # batch_size 2048 / 8


@pytest.mark.parametrize("backend", ["text", "json"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_shape_in_both_backends(tmp_path, script, backend):
    values = [100.0, 200.0, 400.0, 400.0]
    path = write_dllogger(
        tmp_path / f"{script}_1.log", script=script, backend=backend, values=values, summary=250.0, epochs=2
    )
    record = dllogger.parse(path)
    assert record["status"] == "ok" and record["throughput_reported"] == 250.0 and record["repeat"] == 1
    if SCRIPTS[script][2]:  # per-step throughput logged
        assert record["throughput"] == pytest.approx(4 / (1 / 100 + 1 / 200 + 2 / 400))
        assert dllogger.parse(path, {"statistic": "mean_of_steps", "skip_steps": 1})["throughput"] == pytest.approx(
            1000 / 3
        )
    else:
        assert record["throughput"] == 250.0
    assert record["unit"] == SCRIPTS[script][4]


def test_other_ranks_are_skipped_and_labels_win(tmp_path):
    path = write_dllogger(
        tmp_path / "a.log", script="mxnet_convnets", values=[100.0, 300.0], summary=150.0, prefix="[1,0]<stdout>:"
    )
    other = write_dllogger(
        tmp_path / "b.log", script="mxnet_convnets", values=[1.0, 1.0], summary=1.0, prefix="[1,1]<stdout>:"
    )
    path.write_text(path.read_text() + other.read_text())
    record = dllogger.parse(
        path,
        {
            "framework": "ngc-mxnet",
            "topology": "2x8",
            "batch_size": 128,
            "data": "real",
            "compiler": False,
            "variant": "dali",
            "repeat": 3,
        },
    )
    assert record["throughput"] == pytest.approx(150.0) and record["throughput_reported"] == 150.0
    assert (record["config_id"], record["run_id"]) == (
        "resnet50/ngc-mxnet/2x8/dali",
        "resnet50/ngc-mxnet/2x8/dali/rep3",
    )
    assert (record["devices"], record["global_batch_size"]) == (16, 2048)


def test_interrupted_and_garbled_logs_are_error_records_naming_file_and_line(tmp_path):
    path = write_dllogger(tmp_path / "cut.log", values=[100.0] * 5, summary=None, banner=0)
    record = dllogger.parse(path)
    last = len(path.read_text().splitlines())  # the epoch line after the last step
    assert record["status"] == "error" and f"{path}:{last}: per-step train.total_ips but no summary" in record["error"]
    assert record["throughput"] is None and record["config_id"] == "resnet50/dle-pytorch/1x8/bs256-amp"

    lines = write_dllogger(tmp_path / "bad.log", values=[100.0] * 3, banner=0).read_text().splitlines()
    lines[2] = lines[2].replace("train.total_ips : 100.0", "train.total_ips : 1x0.0")
    path.write_text("\n".join(lines) + "\n")
    assert f"{path}:3: train.total_ips is not a number" in dllogger.parse(path)["error"]

    path = write_dllogger(tmp_path / "bad.json", values=[100.0] * 3, backend="json", banner=0)
    path.write_text(path.read_text().replace('"step": [0, 2]', '"step": [0, 2'))
    assert f"{path}:3: unreadable DLLogger record" in dllogger.parse(path)["error"]

    (tmp_path / "none.log").write_text("no DLL records here\n")
    assert "no throughput" in dllogger.parse(tmp_path / "none.log")["error"]


def test_rule_labels_are_checked(tmp_path):
    path = write_dllogger(tmp_path / "a.log", values=[100.0] * 3)
    assert "leaves none" in dllogger.parse(path, {"skip_steps": 3})["error"]
    assert "statistic 'median'" in dllogger.parse(path, {"statistic": "median"})["error"]
    # an unknown label, a topology that is not one: tests/test_contract_logformat.py, for every format


def test_text_pairs_with_units_none_and_lists():
    step, data = dllogger._split_pairs(
        "Epoch: 0 Iteration: 3  train.loss : 5.36 None train.compute_ips : 6019.15 "
        "images/s train.lr : 0.1  val.top1 : None %  gpus : [0, 1, 2]  mode : train "
    )
    assert step == "Epoch: 0 Iteration: 3"
    assert data == {
        "train.loss": "5.36 None",
        "train.compute_ips": "6019.15 images/s",
        "train.lr": "0.1",
        "val.top1": "None %",
        "gpus": "[0, 1, 2]",
        "mode": "train",
    }
    assert dllogger.value_and_unit(data["train.compute_ips"]) == (6019.15, "images/s")
    assert dllogger.value_and_unit(data["val.top1"]) == (None, "%")
    assert dllogger.value_and_unit(data["train.loss"]) == (5.36, None)
    assert (
        dllogger._split_pairs(" e2e_train_time : 1428.9 s training_sequences_per_second : 1542.3 sequences/s")[0] == ""
    )


@pytest.mark.parametrize("name, repeat", [("train_0.log", None), ("train_2.log", 2), ("r1.log", 1)])
def test_a_name_numbered_from_zero_gives_no_repeat_and_still_a_record(tmp_path, name, repeat):
    """Repeats count from 1: a 0-based series' `_0` is not a repeat number (it failed the record schema)."""
    record = imported(write_dllogger(tmp_path / name, script="pytorch_convnets"))
    assert record["status"] == "ok" and record["repeat"] == repeat
    assert record["run_id"].endswith(f"/{Path(name).stem}" if repeat is None else f"/rep{repeat}")
