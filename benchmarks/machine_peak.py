"""The machine's dense matrix-multiply peaks (fp32, bf16): the best of every library here, the ones MFU is measured
against.

    .venv/bin/python benchmarks/machine_peak.py [--n 2048] [--repeats 5]

Runs an n x n GEMM in fp32 and in bf16 (FLOP/s = 2 n^3 / t, each product waited for) in numpy (fp32 only) and,
with each framework environment's own interpreter (.venvs/<framework>-*/bin/python, one process each, threads = the
usable cores), in every registered framework (harness/frameworks.py); the machine's peak in a format is the highest
of them. Every framework's MFU (frameworks.py) is that one peak's share (fp32 runs: the fp32 peak; AMP runs, bf16
autocast on a CPU: the bf16 peak), so two frameworks at the same achieved FLOP/s read the same MFU; each
framework's own GEMM stays a diagnostic. On a GPU, give frameworks.py the device's specification
(--peak-gflops) instead.

One peak per CPU model: writes benchmarks/results/machine_peak-<cpu>.json, which every benchmark on that CPU reads
(frameworks.py runs this script itself where its CPU has none). It refuses to measure on a busy machine (more than
dlbench.harness.peak's QUIET of the CPU time used over 2 s before it starts): a peak read low makes every MFU
against it read high. The GEMM is dlbench.harness.peak's, which the workflow's rule cpu_peak runs for a study's
MFU on a CPU (`platform.cpu_peak: measure`, docs/gpu.md): one measurement, two users.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from resultfile import REPO, RESULTS, Recorder, load1, machine, slug, table  # noqa: E402

from dlbench.harness import peak, sysinfo  # noqa: E402
from dlbench.harness.frameworks import NAMES as FRAMEWORKS  # noqa: E402

COLUMNS = {"fp32": 1, "bf16": 2}  # a format's column in the results file's table


CUDA_GEMM_FORMAT = {"amp": "fp16", "fp32": "TF32"}  # a run's precision -> the format its matrix products use


def cuda_gemm(n: int, repeats: int, precision: str) -> float:
    """FLOP/s of an n x n matrix multiply on the GPU in the format a run of `precision` uses (CUDA_GEMM_FORMAT):
    a diagnostic beside the device's specified peak, which MFU on a GPU is measured against."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True  # as the harness runs fp32 on CUDA
    dtype = {"fp16": torch.float16, "TF32": torch.float32}[CUDA_GEMM_FORMAT[precision]]
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    return peak.timed_rate(lambda: (a @ b, torch.cuda.synchronize()), n, repeats)


def env_python(framework: str) -> Path | None:
    found = sorted((REPO / ".venvs").glob(f"{framework}-*/bin/python"))
    return found[0] if found else None


def peak_file(cpu: str) -> Path:
    """The results file of `cpu`'s peak (its variant is the CPU model)."""
    return RESULTS / f"machine_peak-{slug(cpu)}.json"


def read_peak(cpu: str, fmt: str = "fp32") -> dict | None:
    """{"gflops", "library", "cpu", "date", "libraries"} of this CPU model's peak in `fmt` (fp32, bf16) from its
    results file (libraries: every library's figure in it); None without one, or where the file has no figure in
    that format (a file from before bf16 was measured)."""
    path = peak_file(cpu)
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if result["machine"]["cpu"] != cpu:  # two models with one slug: never another CPU's peak
        return None
    column = COLUMNS[fmt]
    rows = [r for r in result["tables"][0]["rows"] if len(r) > column and isinstance(r[column], (int, float))]
    if not rows:
        return None
    best = max(rows, key=lambda r: r[column])
    return {
        "gflops": best[column],
        "library": best[0],
        "cpu": result["machine"]["cpu"],
        "date": result["date"],
        "libraries": {r[0]: r[column] for r in rows},
    }


def refuse_if_busy() -> None:
    busy = sysinfo.busy_fraction()
    if busy is not None and busy > peak.QUIET:
        raise SystemExit(
            f"machine_peak: the machine is busy ({busy:.0%} of its CPU time used over 2 s, 1-min load {load1()}): "
            "a peak measured now reads low, and every MFU against it high; run it again when the machine is quiet"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--library", help=argparse.SUPPRESS)  # one library, in its own environment: prints GFLOP/s
    args = p.parse_args()
    threads = len(os.sched_getaffinity(0))
    if args.library:
        fp32 = peak.best_of(args.library, args.n, args.repeats, threads) / 1e9
        bf16 = peak.bf16_figure(args.library, args.n, args.repeats, threads)
        print(json.dumps({"fp32": round(fp32, 1), "bf16": bf16["bf16_gflops"] and round(bf16["bf16_gflops"], 1)}))
        return
    refuse_if_busy()
    record = Recorder(__file__)
    rows = []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # every library in a process of its own, numpy too: this one stays idle meanwhile (its own BLAS threads,
    # had it multiplied here, would still hold the cores while the next library is timed)
    for library in ("numpy", *FRAMEWORKS):
        python = Path(sys.executable) if library == "numpy" else env_python(library)
        if python is None:
            print(f"{library}: no environment under .venvs/, skipped")
            continue
        out = subprocess.run(
            [str(python), __file__, "--library", library, "--n", str(args.n), "--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        rates = json.loads(out.strip().splitlines()[-1])
        rows.append([library, *(rates[fmt] if rates[fmt] is not None else "none" for fmt in COLUMNS)])
    notes = []
    for fmt, column in COLUMNS.items():
        figures = [r for r in rows if isinstance(r[column], float)]
        if not figures:
            why = sysinfo.EMULATED_BF16 if fmt == "bf16" and sysinfo.native_bf16() is False else ""
            notes.append(f"no {fmt} machine peak: {why or f'no library here multiplies in {fmt}'}; no {fmt} MFU")
            print(notes[-1])
            continue
        best = max(figures, key=lambda r: r[column])
        print(f"{fmt} machine peak: {best[column]} GFLOP/s ({best[0]})")
        notes.append(f"{fmt} machine peak: {best[column]} GFLOP/s ({best[0]}); frameworks.py's {fmt} MFU is against it")
    for row in rows:
        print(f"{row[0]:11s} " + "  ".join(f"{fmt} {row[column]:>7} GFLOP/s" for fmt, column in COLUMNS.items()))
    cores = machine()["cores"]
    record.write(
        [
            table(
                f"GEMM {args.n}x{args.n}, {cores} threads, best of 3 × {args.repeats} products",
                ["library", *(f"{fmt} GFLOP/s" for fmt in COLUMNS)],
                rows,
            )
        ],
        notes=[*notes, "bf16 none: the library has no bf16 GEMM here (numpy has no bfloat16 type)"],
        variant=slug(machine()["cpu"]),
    )


if __name__ == "__main__":
    main()
