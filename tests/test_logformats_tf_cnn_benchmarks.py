"""tf_cnn_benchmarks output written here in benchmark_cnn.py's line shapes: header, step lines, total."""

from __future__ import annotations

import json

import pytest

from dlbench import logformats
from dlbench.logformats import tf_cnn_benchmarks as tf_cnn
from dlbench.logformats.external_log_fixtures import write_tf_cnn

STEPS = [(1, 233.5, 0.0, 0.0), (10, 240.1, 1.2, 3.4), (20, 241.0, 0.8, 2.9)]


def test_header_steps_and_total(tmp_path):
    path = write_tf_cnn(
        tmp_path / "r2.log",
        model="resnet50_v1.5",
        batch_per_device=64,
        devices=4,
        variable_update="parameter_server",
        steps=STEPS,
        total=960.25,
        synthetic=False,
    )
    record = logformats.parse(path, source="tf_cnn_benchmarks", labels={"precision": "fp32", "compiler": False})
    assert record["status"] == "ok" and record["throughput"] == record["throughput_reported"] == 960.25
    assert (
        record["model"],
        record["framework"],
        record["topology"],
        record["batch_size"],
        record["global_batch_size"],
        record["data"],
        record["framework_version"],
    ) == ("resnet50", "tensorflow", "1x4", 64, 256, "real", "1.15")
    assert record["config_id"] == "resnet50/tensorflow/1x4/bs64-fp32-nocompile-real-parameter_server"
    assert record["run_id"] == record["config_id"] + "/rep2"
    details = json.loads(record["details"])
    assert (details["images_per_sec"], details["uncertainty"], details["jitter"], details["variable_update"]) == (
        241.0,
        0.8,
        2.9,
        "parameter_server",
    )
    assert [s.step for s in tf_cnn.series(path)] == [1, 10, 20]


def test_model_names_and_other_ranks(tmp_path):
    path = write_tf_cnn(tmp_path / "a.log", model="resnet50", prefix="[1,0]<stdout>:")
    other = write_tf_cnn(tmp_path / "b.log", model="vgg16", total=1.0, prefix="[1,1]<stdout>:")
    path.write_text(path.read_text() + other.read_text())
    record = tf_cnn.parse(path)
    assert record["model"] == "resnet50_v1" and record["throughput"] == 220.0  # v1, not dlbench's v1.5
    assert record["data"] == "synthetic"


def test_interrupted_and_garbled_output(tmp_path):
    path = write_tf_cnn(tmp_path / "cut.log", steps=STEPS, total=None)
    lines = path.read_text().splitlines()
    record = tf_cnn.parse(path)
    assert record["status"] == "error" and record["throughput"] is None
    assert f"{path}:{len(lines)}: no 'total images/sec' line after step 20" in record["error"]
    assert record["config_id"] == "resnet50/tensorflow/1x2/bs64-synthetic-replicated"  # still placed

    lines[-2] = "10\timages/sec: 24x0.1 +/- 1.2 (jitter = 3.4)\t7.890"
    path.write_text("\n".join(lines) + "\n")
    assert f"{path}:{len(lines) - 1}: unreadable step line" in tf_cnn.parse(path)["error"]

    (tmp_path / "other.log").write_text("nothing of tf_cnn_benchmarks\n")
    assert "not tf_cnn_benchmarks output" in tf_cnn.parse(tmp_path / "other.log")["error"]


def test_scaled_images_per_sec_without_uncertainty(tmp_path):
    path = write_tf_cnn(tmp_path / "a.log")
    path.write_text(path.read_text().replace("images/sec: 110.0 +/- 1.0 (jitter = 2.0)", "images/sec: 110.0"))
    step = tf_cnn.series(path)[-1]
    assert (step.images_per_sec, step.uncertainty, step.jitter) == (110.0, None, None)
    assert tf_cnn.parse(path)["throughput"] == pytest.approx(220.0)
