"""MLPerf result logs: every figure of the shared reference logs' MANIFEST (when present), and logs written here
through mlperf_logging's own logger (always): per-run time to train and status, the set score (olympic mean,
failed runs among the dropped, unet3d, scaling.json), glued, truncated and garbled logs."""

from __future__ import annotations

import json
import shutil

import pytest

from dlbench import logformats
from dlbench.logformats import mlperf
from dlbench.logformats.external_log_fixtures import START_MS, write_mllog


@pytest.fixture
def reference(external_logs):
    return external_logs


# MANIFEST.md, section A: per-run TTT (min), the expected score, the last eval_accuracy of each run.
SETS = {
    "mllog/v3.0_nvidia_dgxh100_retinanet": (
        [36.7060, 36.9989, 36.9885, 37.0433, 37.0403],
        37.0092,
        [0.3444647419990115, 0.34491598402035667, 0.34203906711972554, 0.3469768369831873, 0.34831020036185584],
    ),
    "mllog/v0.7_google_gpu-v100-8_resnet": (
        [88.2317, 88.5960, 88.6364, 88.4345, 97.1948],
        88.5556,
        [0.7595199942588806, 0.7601000070571899, 0.7597600221633911, 0.759660005569458, 0.7592800259590149],
    ),
    "mllog-v0.6/v0.6_google_tpu-v3-1024_resnet": (
        [2.2781, 2.2661, 2.3592, 2.1734, 2.2751],
        2.3041,
        [0.7598999738693237, 0.7565600275993347, 0.7616400122642517, 0.7602999806404114, 0.7615799903869629],
    ),
    "mlperf-v0.5/v0.5_google_tpuv2-8_resnet": (
        [301.5173, 306.3649, 301.4286, 301.7874, 296.2853],
        301.5778,
        [0.7511393427848816, 0.7509358525276184, 0.7496134638786316, 0.7514445185661316, 0.7501220703125],
    ),
}
SUBMISSION = {  # benchmark, org, platform, division, availability, global batch
    "mllog/v3.0_nvidia_dgxh100_retinanet": ("ssd", "NVIDIA", "1xNVIDIA DGX H100", "closed", "onprem", 256),
    "mllog/v0.7_google_gpu-v100-8_resnet": ("resnet", "google", "gpu-v100-8", "closed", "cloud", 2496),
    "mllog-v0.6/v0.6_google_tpu-v3-1024_resnet": ("resnet", "google", "tpu-v3-1024", "closed", "cloud", 32768),
    "mlperf-v0.5/v0.5_google_tpuv2-8_resnet": ("resnet", None, None, None, None, 1024),
}


@pytest.mark.parametrize("name", SETS)
def test_reference_sets_give_the_manifest_figures(reference, name):
    times, score, accuracies = SETS[name]
    records = mlperf.parse_set(reference / name)
    assert [r["run_id"].rsplit("/", 1)[1] for r in records] == [f"result_{i}" for i in range(5)]
    assert [r["time_to_train_min"] for r in records] == pytest.approx(times, abs=1e-4)  # MANIFEST: 4 decimals
    assert [r["eval_accuracy"] for r in records] == accuracies
    assert [r["score_min"] for r in records] == pytest.approx([score] * 5, abs=1e-4)
    assert {r["scaling_factor"] for r in records} == {1.0}  # no scaling.json in these sets
    benchmark, org, platform, division, availability, gbs = SUBMISSION[name]
    assert {
        (r["benchmark"], r["organization"], r["platform"], r["division"], r["availability"], r["global_batch_size"])
        for r in records
    } == {(benchmark, org, platform, division, availability, gbs)}
    assert len({r["config_id"] for r in records}) == 1 and all(r["source"] == "mlperf" for r in records)


def test_reference_scores_are_not_the_wrong_answers(reference):
    v06 = mlperf.parse_set(reference / "mllog-v0.6/v0.6_google_tpu-v3-1024_resnet")
    assert [r["status"] for r in v06] == ["ok", "failed", "ok", "ok", "ok"]
    assert "abort" in v06[1]["error"]
    # Drop the fastest (result_3); the aborted run counts as the dropped slowest.
    assert [r["score_counted"] for r in v06] == [True, False, True, False, True]
    assert v06[0]["score_min"] == pytest.approx((2.2781 + 2.3592 + 2.2751) / 3, abs=1e-4)
    for wrong in (2.273, 2.277, 2.271):
        assert v06[0]["score_min"] != pytest.approx(wrong, abs=5e-4)
    v07 = mlperf.parse_set(reference / "mllog/v0.7_google_gpu-v100-8_resnet")
    assert v07[0]["score_min"] != pytest.approx(90.219, abs=1e-2)  # a plain mean keeps the 97.19 outlier
    assert round(mlperf.parse_set(reference / "mllog/v3.0_nvidia_dgxh100_retinanet")[0]["score_min"], 3) == 37.009


def test_reference_details(reference):
    retinanet = mlperf.parse(reference / "mllog/v3.0_nvidia_dgxh100_retinanet/result_0.log")
    assert retinanet["batch_size"] == 32 and retinanet["model"] == "ssd"  # local_batch_size; benchmark key "ssd"
    epochs = json.loads(retinanet["details"])["epoch_throughput"]
    assert len(epochs) == 5 and retinanet["throughput"] == pytest.approx(len(epochs) / sum(1 / v for v in epochs))
    resnet = mlperf.parse(reference / "mllog/v0.7_google_gpu-v100-8_resnet/result_0.log")
    assert resnet["model"] == "resnet50" and resnet["throughput"] is None  # no tracked_stats in Google's logs
    assert resnet["status"] == "ok" and resnet["repeat"] == 1


def test_reference_set_with_a_scaling_json(reference, tmp_path):
    shutil.copytree(reference / "mllog/v0.7_google_gpu-v100-8_resnet", tmp_path / "set")
    (tmp_path / "set/scaling.json").write_text('{"scaling_factor": 1.0042}')
    records = mlperf.parse_set(tmp_path / "set")
    assert {r["scaling_factor"] for r in records} == {1.0042}
    assert records[0]["score_min"] == pytest.approx(88.5556 * 1.0042, abs=1e-4)


def write_set(directory, minutes, statuses=None, **kwargs):
    statuses = statuses or ["success"] * len(minutes)
    return [
        write_mllog(directory / f"result_{i}.txt", ttt_min=t, status=s, start_ms=START_MS + i * 10**7, **kwargs)
        for i, (t, s) in enumerate(zip(minutes, statuses, strict=True))
    ]


def test_mllog_written_by_mlperf_logging(tmp_path):
    path = write_set(
        tmp_path / "set",
        [30.5],
        benchmark="bert",
        epoch_throughput=[7000.0, 7100.0],
        global_batch_size=448,
        local_batch_size=56,
        weights_lines=3,
    )[0]
    record = logformats.parse(
        path, source="mlperf", labels={"framework": "ngc-pytorch", "topology": "1x8", "precision": "amp"}
    )
    assert record["status"] == "ok" and record["time_to_train_min"] == pytest.approx(30.5)
    assert (record["model"], record["batch_size"], record["global_batch_size"], record["devices"]) == (
        "bert",
        56,
        448,
        8,
    )
    assert record["config_id"] == "bert/ngc-pytorch/1x8/bs56-amp-real-set"
    assert record["run_id"] == record["config_id"] + "/result_0"
    assert record["throughput"] == pytest.approx(2 / (1 / 7000 + 1 / 7100)) and record["unit"] == "samples/s"
    assert record["eval_accuracy"] == 0.76 and record["organization"] == "dlbench"


def test_set_score_counts_aborted_runs_among_the_slowest_and_applies_scaling_json(tmp_path):
    write_set(tmp_path / "set", [10.0, 11.0, 12.0, 13.0, 9.0], ["success", "aborted", "success", "success", "success"])
    (tmp_path / "set/scaling.json").write_text(json.dumps({"scaling_factor": 1.5}))
    records = mlperf.parse_set(tmp_path / "set")
    assert [r["status"] for r in records] == ["ok", "failed", "ok", "ok", "ok"]
    # ok: 9, 10, 12, 13 -> drop 9 (fastest); the aborted run is the dropped slowest -> mean(10, 12, 13) x 1.5
    assert records[0]["score_min"] == pytest.approx((10 + 12 + 13) / 3 * 1.5)
    assert [r["score_counted"] for r in records] == [True, False, True, True, False]
    assert mlperf.scaling_factor(tmp_path / "set") == 1.5 and mlperf.scaling_factor(tmp_path) == 1.0


def test_score_set_rules():
    assert mlperf.score_set([3.0, 1.0, 2.0, 5.0, 4.0], ["ok"] * 5, "resnet")["score_min"] == pytest.approx(3.0)
    # More failed runs than may be dropped: no score (result_summarizer's CRITICAL ERROR).
    assert (
        mlperf.score_set([1.0, 2.0, 3.0, None, None], ["ok", "ok", "ok", "failed", "error"], "resnet")["score_min"]
        is None
    )
    # unet3d drops 4 at each end; 2 failed runs count among the 4 slowest.
    times = [float(t) for t in range(1, 41)]
    statuses = ["ok"] * 38 + ["failed", "failed"]
    result = mlperf.score_set(times, statuses, "unet3d", factor=2.0)
    assert result["max_dropped"] == 4 and result["n_failed"] == 2
    assert result["score_min"] == pytest.approx(sum(range(5, 37)) / 32 * 2.0)
    assert sum(result["counted"]) == 32


def test_records_glued_to_other_output(tmp_path):
    path = write_set(tmp_path / "set", [20.0])[0]
    lines = path.read_text().splitlines()
    glued = [f"[1,0]<stdout>:some output{line} trailing text" if i % 2 else line for i, line in enumerate(lines)]
    glued[3] = glued[3] + lines[4]  # two records on one line
    del glued[4]
    path.write_text("\n".join(glued) + "\n")
    record = mlperf.parse(path)
    assert record["status"] == "ok" and record["time_to_train_min"] == pytest.approx(20.0)
    assert record["organization"] == "dlbench" and record["division"] == "closed"


def test_truncated_and_garbled_logs_are_error_records_naming_file_and_line(tmp_path):
    path = write_set(tmp_path / "cut", [20.0])[0]
    lines = path.read_text().splitlines()
    run_stop = next(i for i, line in enumerate(lines) if '"run_stop"' in line)
    path.write_text("\n".join(lines[:run_stop]) + "\n" + lines[run_stop][:40])  # cut inside run_stop
    record = mlperf.parse(path)
    assert record["status"] == "error" and f"{path}:{run_stop + 1}:" in record["error"]
    assert record["run_id"].endswith("/result_0") and record["repeat"] == 1

    path.write_text("\n".join(lines[:run_stop]) + "\n")  # cut before run_stop
    record = mlperf.parse(path)
    assert record["status"] == "error" and f"{path}:{run_stop}: no run_stop" in record["error"]

    garbled = lines[:]
    garbled[5] = garbled[5].replace('"key"', '"key" "')
    path.write_text("\n".join(garbled) + "\n")
    assert f"{path}:6: unreadable MLPerf log record" in mlperf.parse(path)["error"]

    (tmp_path / "empty.log").write_text("no MLPerf here\n")
    assert "no MLPerf log record" in mlperf.parse(tmp_path / "empty.log")["error"]
    assert "unreadable log" in mlperf.parse(tmp_path / "missing/result_3.txt")["error"]


def test_run_stop_without_status_and_dict_eval_accuracy(tmp_path):
    path = write_set(
        tmp_path / "set",
        [20.0],
        [None],
        benchmark="maskrcnn",
        eval_accuracy=[{"BBOX": 0.2, "SEGM": 0.1}, {"BBOX": 0.378, "SEGM": 0.341}],
    )[0]
    record = mlperf.parse(path)
    assert record["status"] == "error" and "without metadata.status" in record["error"]
    assert record["eval_accuracy"] is None
    assert json.loads(record["eval_accuracy_json"]) == {"BBOX": 0.378, "SEGM": 0.341}


def test_v06_and_v05_lines(tmp_path):
    v06 = tmp_path / "v06/result_0.txt"
    v06.parent.mkdir()
    v06.write_text(
        ':::MLL 0.0 submission_benchmark: {"value": "resnet", "metadata": {"lineno": 0, "file": "N/A"}}\n'
        ':::MLL 1000.000 global_batch_size: {"value": 1024, "metadata": {"lineno": 1, "file": "m.py"}}\n'
        ':::MLL 1000.500 run_start: {"value": null, "metadata": {"lineno": 2, "file": "m.py"}}\n'
        'I0101 other output:::MLL 1030.500 eval_accuracy: {"value": 0.75, "metadata": {"epoch_num": 4}}\n'
        ':::MLL 1060.500 run_stop: {"value": null, "metadata": {"status": "abort", "lineno": 3}}\n'
        ':::MLL 1060.600 run_final: {"value": null, "metadata": {"lineno": 4, "file": "m.py"}}'
    )  # no newline
    record = mlperf.parse(v06)
    assert (record["status"], record["time_to_train_min"], record["eval_accuracy"], record["global_batch_size"]) == (
        "failed",
        pytest.approx(1.0),
        0.75,
        1024,
    )
    v05 = tmp_path / "v05/result_1.txt"
    v05.parent.mkdir()
    v05.write_text(
        ":::MLPv0.5.0 resnet 900.123456789 (<string>:1) run_clear_caches\n"
        ":::MLPv0.5.0 resnet 1000.000000000 (resnet_main.py:523) run_start\n"
        ":::MLPv0.5.0 resnet 1000.1 (resnet_main.py:551) input_batch_size: 1024\n"
        ':::MLPv0.5.0 resnet 1000.2 (resnet_model.py:161) model_hp_x: "(224, 224, 3) -> (112, 112, 64)"\n'
        ':::MLPv0.5.0 resnet 1100.0 (in_memory_eval.py:262) eval_accuracy: {"value": 0.751, "epoch": 61}\n'
        ':::MLPv0.5.0 resnet 1120.000000000 (in_memory_eval.py:270) run_stop: {"success": "true"}\n'
        ":::MLPv0.5.0 resnet 1121.0 (resnet_main.py:776) run_final\n"
    )
    record = mlperf.parse(v05)
    assert (record["status"], record["time_to_train_min"], record["eval_accuracy"], record["benchmark"]) == (
        "ok",
        pytest.approx(2.0),
        0.751,
        "resnet",
    )
    assert record["repeat"] == 2 and record["global_batch_size"] == 1024
    v05.write_text(v05.read_text().replace('{"success": "true"}', '{"success": "false"}'))
    assert mlperf.parse(v05)["status"] == "failed"
    v05.write_text(":::MLPv0.5.0 resnet oops (x.py:1) run_start\n")
    assert f"{v05}:1: unreadable" in mlperf.parse(v05)["error"]
