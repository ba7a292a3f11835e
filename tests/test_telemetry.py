"""Telemetry (dlbench.telemetry): the sampler on this machine, the energy arithmetic, a real run's record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, harness_command, harness_env, read_log
from dlbench import logformats
from dlbench.collect import aggregate
from dlbench.report.sections import ReportInputs, telemetry
from dlbench.telemetry import summary as tsum

RAPL_ENERGY = Path("/sys/class/powercap/intel-rapl:0/energy_uj")
BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"


def rapl_readable() -> bool:
    try:
        RAPL_ENERGY.read_text()
        return True
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (/proc/<pid>/stat, fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample(pids: list[int], out: Path, seconds: float, interval_ms: int = 50) -> list[dict]:
    """Run the sampler for `seconds` on `pids`; its lines."""
    sampler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlbench.telemetry.sampler",
            "--pids",
            ",".join(map(str, pids)),
            "--interval-ms",
            str(interval_ms),
            "--out",
            str(out),
        ],
        env=harness_env(),
    )
    time.sleep(seconds)
    sampler.send_signal(signal.SIGTERM)
    assert sampler.wait(timeout=15) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def window_inside(lines: list[dict], margin: float = 0.3) -> dict:
    ts = [e["t"] for e in lines if e["kind"] == "sample"]
    return {
        "warmup_start": ts[0],
        "warmup_end": ts[0] + margin,
        "measure_start": ts[0] + margin,
        "measure_end": ts[-1] - 0.1,
    }


def test_sampler_samples_this_machine_and_says_what_it_cannot_read(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        own = [(time.monotonic(), cpu_seconds(busy.pid))]
        lines = sample([busy.pid], tmp_path / "t.jsonl", 1.5)
        own.append((time.monotonic(), cpu_seconds(busy.pid)))
    finally:
        busy.kill()
        busy.wait()
    # the loop's own CPU rate over the sampling, from the kernel's counters: what the sampler must read, however
    # loaded the machine is (beside other tests the loop may get a fraction of a core)
    own_cores = (own[1][1] - own[0][1]) / (own[1][0] - own[0][0])
    start = lines[0]
    assert start["kind"] == "start" and lines[-1]["kind"] == "end"
    assert sum(e["kind"] == "sample" for e in lines) >= 10  # 50 ms for ~1.5 s
    assert start["rapl"]["available"] == rapl_readable()  # the truth about this machine, whatever it is
    fields = tsum.summarise(lines, window_inside(lines), samples=100)
    assert fields["telemetry"] == "ok"
    # A busy loop: the sampler reads the loop's own rate (within what a load changing during the window moves it),
    # never more than the one core a single thread can use
    assert own_cores > 0.02, own_cores  # the loop ran
    assert abs(fields["cpu_run_cores"] - own_cores) <= 0.1 + 0.2 * own_cores, (fields["cpu_run_cores"], own_cores)
    assert fields["cpu_run_cores"] <= 1.05
    rank_cores = float(fields["cpu_rank_cores"])
    assert rank_cores == pytest.approx(fields["cpu_run_cores"], abs=0.05)
    assert 0 < fields["cpu_node_util"] <= 1
    assert fields["rapl"].startswith("readable" if rapl_readable() else "unavailable: ")
    try:
        import pynvml

        pynvml.nvmlInit()
        gpus = pynvml.nvmlDeviceGetCount()
    except Exception:  # noqa: BLE001 - any NVML failure means no GPU telemetry
        gpus = 0
    if not gpus:
        assert fields["gpu_telemetry"].startswith("unavailable: ") and fields["gpu_util_mean"] is None
    if not gpus and not rapl_readable():  # nothing to measure energy with: None, never 0
        assert fields["energy_j"] is None and fields["energy_per_sample_j"] is None
    assert fields["sampler_cores"] is not None and fields["sampler_cores"] < 0.2


def test_contention_is_a_busy_process_beside_the_run(tmp_path):
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the "run": idle
    other = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        lines = sample([run.pid], tmp_path / "t.jsonl", 1.5)
    finally:
        for p in (run, other):
            p.kill()
            p.wait()
    fields = tsum.summarise(lines, window_inside(lines), samples=10)
    assert fields["cpu_run_cores"] < 0.05
    assert fields["contention_cores"] > 0.5 and fields["contended"] is True


def test_counter_arithmetic_with_wrap_around_and_power_integration():
    top = 1_000_000  # max_energy_range_uj
    raw = [900_000, 990_000, 80_000, 170_000]  # wraps between the 2nd and 3rd reading: +90,000 each step
    assert tsum.unwrap(raw, top) == [900_000, 990_000, 1_080_001, 1_170_001]
    ts = [0.0, 1.0, 2.0, 3.0]
    assert tsum.delta(ts, tsum.unwrap(raw, top), 0.5, 2.5) == pytest.approx(2 * 90_000.5, rel=1e-6)
    assert tsum.integrate(ts, [100.0, 100.0, 200.0, 200.0], 0.0, 3.0) == pytest.approx(100 + 150 + 200)
    assert tsum.integrate(ts, [100.0, 100.0, 200.0, 200.0], 1.0, 2.0) == pytest.approx(150)


def fake_lines(counter: bool) -> list[dict]:
    """A driven source (arithmetic only): one GPU at 200 W, RAPL package +50 J/s with a wrap, 1 s apart."""
    start = {
        "kind": "start",
        "host": "n1",
        "interval_ms": 1000,
        "cpu": {"governor": "performance", "turbo": True},
        "rapl": {"available": True, "why_missing": "", "zones": {"intel-rapl:0:package-0": 99_999_999}},
        "gpu": {
            "available": True,
            "why_missing": "",
            "devices": [
                {"app_clock_sm_mhz": 1410, "app_clock_mem_mhz": 1215, "persistence_mode": 1, "other_processes": []}
            ],
        },
    }
    samples = []
    for i in range(6):
        gpu = {
            "util": 90,
            "mem_util": 40,
            "mem_used": 1e9,
            "sm_mhz": 1410,
            "mem_mhz": 1215,
            "power_w": 200.0,
            "temp_c": 60,
            "throttle": 0x4 if i == 3 else 0,
            "energy_mj": 1e6 + 200_000 * i if counter else None,
        }
        samples.append(
            {
                "kind": "sample",
                "t": 100.0 + i,
                "node_busy_s": 10.0 * i,
                "node_total_s": 20.0 * i,
                "run_s": {"7": 1.0 * i},
                "sampler_s": 0.01 * i,
                "freq_mhz": None,
                "rapl_uj": {"intel-rapl:0:package-0": (99_900_000 + 50_000_000 * i) % 100_000_000},
                "gpus": [gpu],
            }
        )
    return [start, *samples, {"kind": "end", "sampler_cpu_s": 0.05, "sampler_wall_s": 5.0}]


@pytest.mark.parametrize("counter", [True, False])
def test_energy_per_sample_from_a_driven_source(counter):
    window = {"warmup_start": 100.0, "warmup_end": 101.0, "measure_start": 101.0, "measure_end": 104.0}
    fields = tsum.summarise(fake_lines(counter), window, samples=600)
    assert fields["gpu_energy_j"] == pytest.approx(600)  # 200 W x 3 s either way
    assert fields["gpu_energy_source"] == (
        "nvml energy counter" if counter else "nvml power integrated (no energy counter)"
    )
    assert fields["cpu_energy_j"] == pytest.approx(150)  # 50 J/s x 3 s across the wrap
    assert fields["energy_j"] == pytest.approx(750) and fields["energy_per_sample_j"] == pytest.approx(1.25)
    assert fields["samples_per_j"] == pytest.approx(0.8) and fields["power_mean_w"] == pytest.approx(250)
    assert fields["throttled"] is True and fields["throttle_reasons"] == "0x4"
    assert fields["contention_cores"] == pytest.approx(10 - 1 - 0.01)  # node busy - run - sampler, per second
    assert fields["contended"] is True and fields["cpu_node_util"] == pytest.approx(0.5)


def test_telemetry_off_leaves_every_field_empty():
    fields = tsum.summarise([], None, samples=10)
    assert fields["telemetry"] == "off" and all(v is None for k, v in fields.items() if k != "telemetry")


def test_a_real_run_records_telemetry_and_is_flagged_under_contention(torch_python, tmp_path):
    log = tmp_path / "resnet50" / "pytorch" / "1x1" / "run.jsonl"
    other = subprocess.Popen([sys.executable, "-c", BUSY])  # another process on the machine
    try:
        env = dict(harness_env(), DLBENCH_TELEMETRY_PYTHON=sys.executable)
        options = {"topology": "1x1", "image_size": 32, "batch_size": 2, "warmup_steps": 2, "measured_steps": 20}
        cmd = harness_command(torch_python, log, {**options, "device": "cpu", "cpus": 1, "telemetry_ms": 50})
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    finally:
        other.kill()
        other.wait()
    assert result.returncode == 0, result.stderr
    entries = read_log(log)
    assert list(entries)[-1] == "summary" and entries["summary"][0]["status"] == "ok"
    assert entries["window"] and len(entries["telemetry"]) > 3
    assert not log.with_name(log.name + ".telemetry").exists()
    record = logformats.parse(log)
    assert record["telemetry"] == "ok" and record["telemetry_interval_ms"] == 50
    # the run's own cores (one given, the busy loop's not counted), however loaded the machine: never how quiet it is
    assert 0 < record["cpu_run_cores"] <= 1.05 and record["cpu_warmup_run_cores"] is not None
    assert record["contended"] is True
    summary = aggregate.summarise(aggregate.records_frame([str(log)]))
    assert "contention" in summary["flags"].iloc[0]
    section = telemetry(ReportInputs(aggregate.records_frame([str(log)]), summary, {}))
    assert section is not None and "⚑" in section.rows[0]["Others (cores, max)"]


def test_energy_reaches_the_summary_the_flags_the_section_and_the_plot(tmp_path):
    """A log with driven telemetry lines -> record -> summary (median energy per sample with its interval,
    contention and throttle flags) -> report section and energy.png."""
    from dlbench.logformats.run_log_fixtures import write_run_log
    from dlbench.report.plots import write_plots

    logs = []
    for repeat in range(1, 7):  # enough repeats for an interval of the median at 95%
        log = write_run_log(tmp_path / f"rep{repeat}.jsonl", repeat=repeat)
        lines = log.read_text().splitlines()
        extra = [
            json.dumps(
                {
                    "type": "window",
                    "warmup_start": 100.0,
                    "warmup_end": 101.0,
                    "measure_start": 101.0,
                    "measure_end": 104.0,
                }
            )
        ]
        extra += [json.dumps({"type": "telemetry", "host": "n1", **e}) for e in fake_lines(counter=True)]
        log.write_text("\n".join([*lines[:-1], *extra, lines[-1]]) + "\n")
        logs.append(str(log))
    records = aggregate.records_frame(logs)
    assert records["energy_per_sample_j"].tolist() == pytest.approx([750 / 320] * 6)
    summary = aggregate.summarise(records)
    row = summary.iloc[0]
    assert row["energy_per_sample_j"] == pytest.approx(750 / 320) and row["contended_runs"] == 6
    assert row["energy_ci_low"] <= row["energy_per_sample_j"] <= row["energy_ci_high"]
    assert "contention" in row["flags"] and "throttled" in row["flags"]
    section = telemetry(ReportInputs(records, summary, {}))
    assert section.rows[0]["J/sample [interval]"].startswith("2.344") and "⚑" in section.rows[0]["Throttled"]
    assert write_plots(summary, tmp_path) and (tmp_path / "energy.png").stat().st_size > 0


def test_a_sampler_that_cannot_run_is_recorded_as_unavailable(tmp_path):
    from dlbench.harness.__main__ import stop_sampler

    log = tmp_path / "run.jsonl"
    log.write_text('{"type":"header"}\n{"type":"summary","status":"ok"}\n')
    stop_sampler("$DLBENCH_TELEMETRY_PYTHON is not set", log)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["type"] for e in lines] == ["header", "telemetry", "summary"]
    fields = tsum.summarise([lines[1]], None, samples=10)
    assert fields["telemetry"] == "unavailable: $DLBENCH_TELEMETRY_PYTHON is not set"


def test_a_rank_that_exits_keeps_its_last_cpu_reading():
    """A rank that exits (and is reaped) between two samples, and a tree refreshed after it went: its series keeps
    its last reading; falling to 0 would read as negative CPU over the window's end."""
    from dlbench.telemetry.sampler import Tree

    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(60)"
    rank = subprocess.Popen([sys.executable, "-c", busy])
    try:
        tree = Tree([rank.pid], parent=None, match="", exclude=-1)
        tree.refresh()
        deadline = time.monotonic() + 30
        while (reading := tree.cpu_seconds()[str(rank.pid)]) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reading >= 0.25
    finally:
        rank.send_signal(signal.SIGKILL)
        rank.wait()
    tree.refresh()  # the root is gone: its members stay those last seen
    assert tree.cpu_seconds()[str(rank.pid)] == tree.last[rank.pid] == reading
