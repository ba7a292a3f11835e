"""AMP on a CPU without native bf16 (no AVX-512 BF16, AMX or Arm BF16): said before any job, recorded unsupported
in seconds where the study says skip, flagged where it runs (test_aggregate), and no bf16 peak measured for it.

This machine's CPU is shown without its native-bf16 flags: a mount namespace whose /proc/cpuinfo lacks them, as a
VM that masks CPUID flags shows its guest. What is tested is dlbench's reading of the CPU; the frameworks' kernels
still see the real one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, harness_env, local_env, log_lines, tiny_config, write_config
from dlbench.harness import sysinfo

NATIVE = "|".join(sysinfo.NATIVE_BF16_FLAGS)
needs_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare (a mount namespace)"
)


def without_native_bf16(tmp_path: Path, command: list[str]) -> list[str]:
    """`command` as it runs on this machine with /proc/cpuinfo's native-bf16 flags hidden."""
    fake = tmp_path / "cpuinfo"
    fake.write_text(re.sub(rf" ({NATIVE})(?= |$)", "", Path("/proc/cpuinfo").read_text(), flags=re.M))
    return ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /proc/cpuinfo && exec "$@"', str(fake), *command]


def test_native_bf16_is_read_from_the_instruction_sets_a_cpu_lists():
    zen3 = {"avx2", "fma", "sse4_2"}  # AVX2 only
    skylake = zen3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # AVX-512 without its BF16 extension
    assert sysinfo.native_bf16(zen3) is False and sysinfo.native_bf16(skylake) is False
    assert sysinfo.native_bf16(skylake | {"avx512_bf16"}) and sysinfo.native_bf16(skylake | {"amx_bf16"})
    assert sysinfo.native_bf16({"asimd", "sve", "bf16"})  # Arm's (Graviton 3) Features line
    assert sysinfo.native_bf16(set()) is None  # nothing to read: not known
    assert sysinfo.model_native_bf16("AMD EPYC (family 25 model 1, AVX2)") is False
    assert sysinfo.model_native_bf16("Intel Xeon (family 6 model 85, AVX-512)") is False
    assert sysinfo.model_native_bf16("AMD EPYC (family 25 model 17, AVX-512 BF16)")
    assert sysinfo.model_native_bf16("Intel Xeon (family 6 model 143, AMX)")
    assert sysinfo.model_native_bf16("Tesla V100-SXM2-16GB") is None  # a GPU's name, or another tool's words


@needs_namespace
def test_no_bf16_peak_is_measured_where_bf16_is_emulated(tmp_path):
    """peak.bf16_figure returns at once with the reason (a 2048³ bf16 GEMM ran minutes on one AVX2 core)."""
    code = (
        "import json; from dlbench.harness import peak, sysinfo; "
        "print(json.dumps([sysinfo.cpu_model(), peak.bf16_figure('pytorch')]))"
    )
    done = subprocess.run(
        without_native_bf16(tmp_path, [sys.executable, "-c", code]),
        capture_output=True,
        text=True,
        env=harness_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    model, figure = json.loads(done.stdout)
    assert "BF16" not in model and "AMX" not in model
    assert figure["bf16_gflops"] is None and "no native bf16 on this CPU" in figure["bf16_reason"]


@needs_namespace
def test_a_study_says_so_before_any_job_and_skip_records_unsupported_in_seconds(tmp_path):
    """Through a real Snakemake: the plan names the AMP runs that would be emulated; with skip each is recorded
    unsupported with the reason, and the report counts it unsupported, not failed."""
    config = tiny_config(defaults={**tiny_config()["defaults"], "repeats": 1})
    config["matrix"] |= {"precision": ["amp"], "topology": ["1x1"]}
    config["platform"] |= {"emulated_bf16": "skip"}
    study = write_config(tmp_path / "study.yaml", config)

    def snakemake(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        return subprocess.run(
            without_native_bf16(tmp_path, [*command, *args, "--configfile", str(study)]),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=local_env(),
            timeout=600,
        )

    write_config(study, config | {"platform": config["platform"] | {"emulated_bf16": "run"}})
    planned = snakemake("-n")
    assert planned.returncode == 0, planned.stderr
    assert re.search(
        r"dlbench: warning: study.yaml, line \d+: matrix.precision: amp: this machine's CPU \(.*\) has no native "
        r"bf16 .*: its 1 AMP runs \(1 configurations: pytorch\) run emulated where they run on it, 7-17x slower",
        planned.stderr,
    ), planned.stderr

    write_config(study, config)
    done = snakemake("--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "are recorded unsupported without running where they run on it (platform.emulated_bf16: skip)" in done.stderr
    (log,) = (tmp_path / "results" / "runs").rglob("rep1.jsonl")
    summary = log_lines(log)[-1]
    assert summary["status"] == "unsupported" and "no native bf16 on this CPU" in summary["error"]
    assert "platform.emulated_bf16: skip" in summary["error"]
    (readme,) = (tmp_path / "results" / "reports").glob("v*/README.md")
    text = readme.read_text()
    assert "1 configurations: 0 fully successful, 0 partially failed, 0 failed, 1 unsupported" in text
