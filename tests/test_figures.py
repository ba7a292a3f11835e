"""The benchmark figures in the docs are the scripts' results files, rendered by benchmarks/figures.py."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

FIGURES = REPO / "benchmarks" / "figures.py"


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FIGURES), "--check", "--root", str(root)], capture_output=True, text=True
    )


def copy_docs(tmp_path: Path) -> Path:
    """The docs and results files of this checkout, alone in tmp_path."""
    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    for doc in ("docs/development.md", "benchmarks/README.md"):
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / doc, tmp_path / doc)
    return tmp_path


def test_repository_docs_match_the_results_files():
    assert any((REPO / "benchmarks" / "results").glob("*.json"))
    done = check(REPO)
    assert done.returncode == 0, done.stderr


def test_a_figure_edited_by_hand_fails_the_check(tmp_path):
    root = copy_docs(tmp_path)
    doc = root / "benchmarks" / "README.md"
    text = doc.read_text()
    block = re.search(r"<!-- figures:([\w.-]+) -->", text)
    result = json.loads((root / "benchmarks" / "results" / f"{block[1]}.json").read_text())
    start, block_end = block.start(), text.index(f"<!-- /figures:{block[1]} -->")
    edited = text[start:block_end].replace(result["command"], result["command"] + " --rounds 99", 1)
    assert edited != text[start:block_end]
    doc.write_text(text[:start] + edited + text[block_end:])
    assert check(root).returncode == 1
    # regenerating restores it, and the check passes again
    subprocess.run([sys.executable, str(FIGURES), "--root", str(root)], check=True, capture_output=True)
    assert doc.read_text() == text
    assert check(root).returncode == 0


def test_a_new_results_file_is_rendered_and_an_orphan_block_is_an_error(tmp_path):
    root = copy_docs(tmp_path)
    new = {
        "script": "x.py",
        "command": ".venv/bin/python benchmarks/x.py",
        "date": "2026-01-01T00:00:00+00:00",
        "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 1.0, "gpu": "none"},
        "load": [0.5, 1.25],
        "tables": [{"title": "t", "columns": ["a", "b"], "rows": [["r", 1.5]]}],
        "notes": ["a note"],
    }
    (root / "benchmarks" / "results" / "x.json").write_text(json.dumps(new))
    assert check(root).returncode == 1  # not yet in the docs
    subprocess.run([sys.executable, str(FIGURES), "--root", str(root)], check=True, capture_output=True)
    text = (root / "benchmarks" / "README.md").read_text()
    block = text[text.index("<!-- figures:x -->") : text.index("<!-- /figures:x -->")]
    assert "| r | 1.5 |" in block and "load 0.5 before, 1.25 after" in block and new["command"] in block
    assert check(root).returncode == 0
    (root / "benchmarks" / "results" / "x.json").unlink()
    assert check(root).returncode == 1  # a block whose results file is gone


def test_a_results_file_follows_the_convention(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BENCH_RESULTS", str(tmp_path))
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setattr(sys, "argv", [str(REPO / "benchmarks" / "demo.py"), "--rounds", "3"])
    import resultfile

    resultfile = importlib.reload(resultfile)  # RESULTS from the environment above
    path = resultfile.Recorder("demo.py").write([resultfile.table("t", ["a"], [[1]])], ["n"], variant="v")
    assert path == tmp_path / "demo-v.json"
    result = json.loads(path.read_text())
    assert set(result) == {"script", "command", "date", "machine", "load", "tables", "notes"}
    assert result["command"].endswith("benchmarks/demo.py --rounds 3")
    assert set(result["machine"]) == {"cpu", "cores", "memory_gib", "gpu"} and result["machine"]["cores"] >= 1
    assert len(result["load"]) == 2 and all(isinstance(x, float) for x in result["load"])
    assert result["date"].endswith("+00:00") and result["tables"][0]["rows"] == [[1]]


def test_two_levels_of_rounds_are_flagged_bimodal():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import rounds

    assert rounds.modes([30.1, 31.0, 30.5, 29.8, 31.2, 30.7]) is None  # noise
    low, high = rounds.modes([58.0, 32.1, 57.2, 31.5, 59.0, 56.4])
    assert low == [31.5, 32.1] and len(high) == 4
    assert rounds.modes([58.0, 32.1, 57.2, 59.0, 56.4, 57.7]) is None  # one slow round: an outlier, not a mode
    assert rounds.summary("x", [58.0, 32.1, 57.2, 31.5])["bimodal"]
    assert rounds.describe([58.0, 32.1, 57.2, 31.5]).startswith("BIMODAL 2× ~31.8, 2× ~57.6")
    order = []
    rounds.interleaved(2, lambda: order.append("a") or 1.0, lambda: order.append("b") or 2.0)
    assert order == ["a", "b", "b", "a"]
    # a comparison is UNSTABLE when one loop alone switches modes (its per-round ratios split), and a ratio with
    # its interval when both loops move together (the machine's levels cancel in each round's pair)
    base = [30.0, 31.0, 30.5, 29.8, 30.2, 30.9]
    loops, verdict = rounds.paired("plain", base, "ours", [58.0, 32.1, 57.2, 31.5, 59.0, 56.4], 1.0)
    assert verdict.startswith("UNSTABLE") and loops[2]["name"] == "ours ÷ plain" and loops[1]["bimodal"]
    together = [2 * b for b in [58.0, 32.1, 57.2, 31.5, 59.0, 56.4]]
    loops, verdict = rounds.paired("plain", [58.0, 32.1, 57.2, 31.5, 59.0, 56.4], "ours", together, 1.0)
    assert verdict.startswith("median of per-round ratios 2.000 [2.000–2.000] (at target")
    assert rounds.row(loops[2]) == ["ours ÷ plain", 2.0, "2–2", "2 2 2 2 2 2"]
    assert rounds.columns("loop", "images/s") == [
        "loop",
        "median (images/s; ratio)",
        "rounds (min–max, modes)",
        "per round",
    ]
    assert rounds.line(loops[2], 12) == "ours ÷ plain median    2.000  rounds 2–2: " + ", ".join(["2.000"] * 6)


def test_a_parity_reads_against_its_a_a_pair():
    """Three loops interleave in every order in turn (each loop as often in each place of a round, and after each
    other loop); a harness ÷ plain ratio meets its target only at or above it and not below the A/A pair's
    interval, and one below the A/A interval is named a bias."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import rounds

    order = []
    rounds.interleaved(6, *(lambda name=name: order.append(name) or 1.0 for name in "abc"))
    assert ["".join(order[i : i + 3]) for i in range(0, 18, 3)] == ["abc", "acb", "bac", "bca", "cab", "cba"]
    plain = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 103.0, 97.0]
    again = [p * f for p, f in zip(plain, [1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99], strict=True)]
    level = [p * 1.01 for p in plain]
    loops, verdict, figures = rounds.parity("plain", plain, "harness", level, again, 1.0)
    assert (
        figures["met"]
        and "at target" in verdict
        and [loop["name"] for loop in loops][2:]
        == [
            "plain (A/A)",
            "harness ÷ plain",
            "A/A: plain ÷ plain",
        ]
    )
    assert figures["aa_interval"][0] <= figures["aa_ratio"] <= figures["aa_interval"][1]
    low = [p * 0.99 for p in plain]  # 1% low, inside an A/A spread of ±2%: not evidence of a bias
    _, verdict, figures = rounds.parity("plain", plain, "harness", low, again, 1.0)
    assert not figures["met"] and "within the noise floor" in verdict
    steady = [p * 1.0 for p in plain]
    _, verdict, figures = rounds.parity("plain", plain, "harness", [p * 0.95 for p in plain], steady, 1.0)
    assert not figures["met"] and "below the noise floor: a bias of 5.0%" in verdict


def test_machine_peak_is_one_per_cpu_model_and_refused_on_a_busy_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BENCH_RESULTS", str(tmp_path))
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    for name in ("resultfile", "machine_peak"):
        sys.modules.pop(name, None)
    import machine_peak
    import resultfile

    cpu = resultfile.machine()["cpu"]
    assert machine_peak.read_peak(cpu) is None
    monkeypatch.setattr(sys, "argv", [str(REPO / "benchmarks" / "machine_peak.py")])
    # a file from before bf16 was measured: its fp32 peak, and no bf16 one (frameworks.py then measures again)
    resultfile.Recorder("machine_peak.py").write(
        [resultfile.table("t", ["library", "GFLOP/s"], [["numpy", 90.5], ["pytorch", 120.25]])],
        variant=resultfile.slug(cpu),
    )
    assert machine_peak.peak_file(cpu).exists() and machine_peak.peak_file(cpu).name.startswith("machine_peak-")
    assert machine_peak.read_peak(cpu)["gflops"] == 120.25 and machine_peak.read_peak(cpu)["library"] == "pytorch"
    assert machine_peak.read_peak(cpu, "bf16") is None
    assert machine_peak.read_peak("Another CPU (family 1 model 1)") is None
    rows = [["numpy", 130.5, "none"], ["pytorch", 120.25, 480.0], ["mxnet", 60.0, 20.5]]
    resultfile.Recorder("machine_peak.py").write(
        [resultfile.table("t", ["library", "fp32 GFLOP/s", "bf16 GFLOP/s"], rows)], variant=resultfile.slug(cpu)
    )
    assert machine_peak.read_peak(cpu)["gflops"] == 130.5 and machine_peak.read_peak(cpu)["library"] == "numpy"
    assert (
        machine_peak.read_peak(cpu, "bf16")["gflops"] == 480.0
        and machine_peak.read_peak(cpu, "bf16")["library"] == "pytorch"
    )
    # every library's figure, which frameworks.py sets its own GEMM of the day against (a slower machine is flagged)
    assert machine_peak.read_peak(cpu, "bf16")["libraries"] == {"pytorch": 480.0, "mxnet": 20.5}
    # a real busy machine: two processes spinning on this machine's cores while the peak would be measured
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        with pytest.raises(SystemExit, match="the machine is busy"):
            machine_peak.refuse_if_busy()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
