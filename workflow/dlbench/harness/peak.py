"""A CPU's dense matrix-multiply peaks (fp32 and bf16), measured in one library on the machine the runs use: what
MFU on a CPU is measured against (fp32 runs against the fp32 peak, AMP runs, whose matrix products autocast to
bf16 on a CPU, against the bf16 one).

A CPU has no datasheet figure the report can trust (one model name covers vector units 2x apart, bf16 is native on
some and emulated on others, and the clock depends on how many cores are busy), so the peak is measured: an n x n
GEMM per format, FLOP/s = 2 n^3 / t with each product finished before the next, on every core the process may use,
the best of three trials. A library with no bf16 GEMM (numpy) records none and says so. The machine's peak
is the highest over the libraries measured (each framework's own, in its own environment: the workflow's rule
cpu_peak, benchmarks/machine_peak.py), so that two frameworks at the same achieved FLOP/s read the same MFU.

A peak read on a busy machine reads low, and every MFU against it high: `measure` first waits for the machine to be
quiet (at most `quiet` of its CPU time used by others over 2 s) and, where it never is, records no figure and why.

This module imports only the standard library and numpy; a framework's product is its backend's (`cpu_gemm`), so
it runs in that framework's environment.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

from . import sysinfo
from .frameworks import NAMES, REGISTRY

LIBRARIES = ("numpy", *NAMES)  # numpy, and each framework in its own environment
FORMATS = ("fp32", "bf16")  # the matrix math of a CPU run: fp32, or bf16 under AMP (devices.run_math)
RECORD_KEYS = {"fp32": ("gflops", "reason"), "bf16": ("bf16_gflops", "bf16_reason")}  # a format's figure, its why
NO_BF16 = {"numpy": "numpy has no bfloat16 type"}
N = 2048  # the matrix side: large enough that every library reaches its steady rate, a fraction of a second each
REPEATS = 5  # products per trial
TRIALS = 3  # the best of these
QUIET = 0.10  # the share of the machine's CPU time others may use while the peak is measured
WAIT_S = 120.0  # how long to wait for a quiet machine before recording no figure


def timed_rate(product: Callable[[], object], n: int, repeats: int) -> float:
    """FLOP/s of `repeats` calls of an n x n matrix product (each call must return once its product is done)."""
    product()  # the library's first call: its kernels chosen, its buffers allocated
    start = time.perf_counter()
    for _ in range(repeats):
        product()
    return repeats * 2 * n**3 / (time.perf_counter() - start)


def gemm(library: str, n: int = N, repeats: int = REPEATS, threads: int | None = None, fmt: str = "fp32") -> float:
    """FLOP/s of an n x n matrix multiply in `fmt` (FORMATS; both operands and the product in it, as autocast
    multiplies) in `library` with `threads` threads (default: every core this process may use), each product
    finished before the next starts. A framework's product is its backend's `cpu_gemm`, set up as its runs are;
    numpy's is its own. ValueError for a library or format it cannot do."""
    threads = threads or len(sysinfo.usable_cpus())
    if fmt not in FORMATS:
        raise ValueError(f"no GEMM in format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "bf16" and library in NO_BF16:
        raise ValueError(NO_BF16[library])
    if library == "numpy":
        import numpy as np

        a, b = (np.random.randn(n, n).astype(np.float32) for _ in range(2))
        return timed_rate(lambda: a @ b, n, repeats)
    if library not in REGISTRY:
        raise ValueError(f"no GEMM for library {library!r} (known: {', '.join(LIBRARIES)})")
    backend = importlib.import_module(REGISTRY[library].backend_module).Backend
    return timed_rate(backend.cpu_gemm(n, threads, fmt), n, repeats)


def best_of(
    library: str,
    n: int = N,
    repeats: int = REPEATS,
    threads: int | None = None,
    trials: int = TRIALS,
    fmt: str = "fp32",
) -> float:
    return max(gemm(library, n, repeats, threads, fmt) for _ in range(trials))


def wait_until_quiet(quiet: float = QUIET, wait_s: float = WAIT_S) -> float | None:
    """Wait (2 s windows) until others use at most `quiet` of the machine's CPU time; the last window's busy share
    (None where /proc/stat cannot say). Returns as soon as a window is quiet, or after `wait_s` with the last."""
    deadline = time.monotonic() + wait_s
    while True:
        busy = sysinfo.busy_fraction()
        if busy is None or busy <= quiet or time.monotonic() >= deadline:
            return busy


def measure(library: str, quiet: float = QUIET, wait_s: float = WAIT_S, n: int = N) -> dict:
    """The peaks of `library` on this machine as a record: the CPU model (as runs record their device), GFLOP/s in
    fp32 (gflops) and bf16 (bf16_gflops; None with bf16_reason where the library has no bf16 GEMM), and how quiet
    the machine was; every figure None and the reason where the machine never became quiet."""
    busy = wait_until_quiet(quiet, wait_s)
    record = {
        "cpu": sysinfo.cpu_model(),
        "host": socket.gethostname(),
        "library": library,
        "threads": len(sysinfo.usable_cpus()),
        "n": n,
        "busy_before": busy,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if busy is not None and busy > quiet:
        reason = (
            f"the machine stayed busy ({busy:.0%} of its CPU time used by others over 2 s after {wait_s:g} s of "
            f"waiting; at most {quiet:.0%} allowed): a peak measured now would read low and every MFU against it high"
        )
        return record | {"gflops": None, "reason": reason, "bf16_gflops": None, "bf16_reason": reason}
    fp32 = best_of(library, n) / 1e9
    return record | {"gflops": fp32, "reason": None, **bf16_figure(library, n)}


def bf16_figure(library: str, n: int = N, repeats: int = REPEATS, threads: int | None = None) -> dict:
    """bf16_gflops, or None with bf16_reason: a library without the type, a CPU without native bf16 (emulated: not
    measured), or kernels that refuse it on this CPU (MXNet's need AVX-512), records why and keeps its fp32 figure."""
    if library in NO_BF16:
        return {"bf16_gflops": None, "bf16_reason": NO_BF16[library]}
    if sysinfo.native_bf16() is False:  # emulated: no peak worth holding a run to, and minutes to measure one
        return {"bf16_gflops": None, "bf16_reason": f"{sysinfo.EMULATED_BF16}: no bf16 peak to hold its runs to"}
    try:
        return {"bf16_gflops": best_of(library, n, repeats, threads, fmt="bf16") / 1e9, "bf16_reason": None}
    except Exception as error:  # noqa: BLE001 - any library's refusal is a reason to record, not a crash
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return {"bf16_gflops": None, "bf16_reason": f"{library} could not multiply in bf16 here: {first}"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, choices=LIBRARIES)
    parser.add_argument("--out", type=Path, required=True, help="the record (JSON)")
    parser.add_argument("--n", type=int, default=N, help="matrix side")
    parser.add_argument("--quiet", type=float, default=QUIET, help="share of CPU time others may use")
    parser.add_argument("--wait", type=float, default=WAIT_S, help="seconds to wait for a quiet machine")
    args = parser.parse_args(argv)
    record = measure(args.library, args.quiet, args.wait, args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    partial.replace(args.out)
    for fmt, (key, why) in RECORD_KEYS.items():
        said = f"{record[key]:.1f} GFLOP/s" if record[key] is not None else f"no figure: {record[why]}"
        print(f"dlbench: {args.library} {fmt} GEMM peak on {record['cpu']}, {record['threads']} threads: {said}")


if __name__ == "__main__":
    main()
