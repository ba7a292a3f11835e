"""`python -m dlbench.harness.batchsearch ...`: find the largest batch size per device that trains (`batch_size: max`).

Each probe is a short real run of the harness (`python -m dlbench.harness`, one warm-up step and a few measured
steps) at one batch size, which ends `ok` or `oom` like any run: on a GPU the framework's own out-of-memory
error, on CPU an allocation beyond the study's memory budget (--memory-limit-gb, rank.limit_memory). The sizes
are multiples of --multiple: grow by doubling from it until a probe runs out of memory (or the cap,
--max-batch-size, is reached), then bisect between the last size that fitted and the first that did not.

A probe that ends any other way (error, timeout, unsupported, failed) stops the search with that status: the
result is never a size that was not seen to fit. The result (--out, JSON) names every probe with its status,
error, memory and time; the probes' own logs are kept beside it (<out>.probes/bs<N>.jsonl).

Standard library only: it runs in the framework's environment, like the harness it starts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .runlog import utc_now
from .spec import command_line

# Probe arguments the search sets itself (the rest is passed to the harness as given).
PROBE_WARMUP_STEPS = 1
OWN_ARGS = (
    "--batch-size",
    "--log",
    "--warmup-steps",
    "--measured-steps",
    "--repeat",
    "--config-id",
    "--telemetry-ms",
    "--attempt",
    "--max-attempts",
)

Probe = Callable[[int], dict[str, Any]]  # batch size -> {"batch_size", "status", ...}


def search(probe: Probe, multiple: int, cap: int | None) -> dict[str, Any]:
    """Double from `multiple`, then bisect (in steps of `multiple`) between the last ok and the first oom size.
    Returns status (ok, or the status that stopped the search), batch_size (the largest ok size, ok only),
    capped (the cap was reached without running out of memory), reason and the probes in the order run."""
    if cap is not None:
        cap -= cap % multiple
        if cap < multiple:
            raise ValueError(f"the cap {cap} is smaller than the multiple {multiple}")
    probes: list[dict[str, Any]] = []

    def run(size: int) -> str:
        probes.append(probe(size))
        return probes[-1]["status"]

    def stopped(status: str) -> dict[str, Any]:
        last = probes[-1]
        return {
            "status": status,
            "batch_size": None,
            "capped": False,
            "probes": probes,
            "reason": f"the probe at batch size {last['batch_size']} ended {status}, not ok or oom: "
            f"{last.get('error') or 'no message'}",
        }

    fits, fails, size = 0, None, multiple
    while fails is None:
        status = run(size)
        if status == "oom":
            fails = size
        elif status != "ok":
            return stopped(status)
        else:
            fits = size
            if cap is not None and size >= cap:
                return {
                    "status": "ok",
                    "batch_size": fits,
                    "capped": True,
                    "probes": probes,
                    "reason": f"reached the cap, max_batch_size {cap}, without running out of memory",
                }
            size = min(size * 2, cap) if cap is not None else size * 2
    while fails - fits > multiple:
        middle = fits + (fails - fits) // (2 * multiple) * multiple
        status = run(middle)
        if status == "ok":
            fits = middle
        elif status == "oom":
            fails = middle
        else:
            return stopped(status)
    if fits == 0:
        return {
            "status": "oom",
            "batch_size": None,
            "capped": False,
            "probes": probes,
            "reason": f"even the smallest size, {multiple}, ran out of memory",
        }
    return {
        "status": "ok",
        "batch_size": fits,
        "capped": False,
        "probes": probes,
        "reason": f"{fits} fits and {fails} runs out of memory",
    }


def _summary(log: Path) -> dict[str, Any]:
    """The probe's outcome: its log's last line (a summary, whatever happened), or why there is none."""
    try:
        lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        return {"status": "error", "error": f"the probe wrote no readable log ({error})"}
    last = lines[-1] if lines else {}
    if last.get("type") != "summary":
        return {"status": "error", "error": "the probe's log has no summary"}
    return last


def memory_of(summary: dict[str, Any]) -> dict[str, Any]:
    """Peak memory (device, else RSS) and peak address space, the highest over the ranks, and the limit."""
    entries = summary.get("ranks") or ([summary["memory"]] if summary.get("memory") else [])
    out: dict[str, Any] = {}
    for key in ("peak_memory_bytes", "vm_peak_bytes", "vm_baseline_bytes", "address_space_limit_bytes"):
        values = [e[key] for e in entries if isinstance(e.get(key), (int, float))]
        out[key] = max(values) if values else None
    return out


def harness_probe(harness_args: list[str], probes_dir: Path, measured_steps: int) -> Probe:
    """A probe = the harness run at one batch size, its log in probes_dir; its stderr goes to ours."""

    def probe(size: int) -> dict[str, Any]:
        log = probes_dir / f"bs{size}.jsonl"
        cmd = [
            sys.executable,
            "-m",
            "dlbench.harness",
            *harness_args,
            *command_line(
                {
                    "batch_size": size,
                    "warmup_steps": PROBE_WARMUP_STEPS,
                    "measured_steps": measured_steps,
                    "config_id": f"batch-search/bs{size}",
                    "log": log,
                }
            ),
        ]
        print(f"[dlbench] batch-size search: probing {size}", file=sys.stderr, flush=True)
        started = time.monotonic()
        code = subprocess.run(cmd, check=False).returncode
        summary = (
            _summary(log)
            if code == 0 or log.exists()
            else {"status": "error", "error": f"the harness exited with code {code} without a log"}
        )
        result = {
            "batch_size": size,
            "status": summary.get("status", "error"),
            "error": summary.get("error", ""),
            "seconds": round(time.monotonic() - started, 3),
            **memory_of(summary),
            "log": str(log),
        }
        print(f"[dlbench] batch-size search: {size} -> {result['status']}", file=sys.stderr, flush=True)
        return result

    return probe


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dlbench.harness.batchsearch",
        description="Find the largest batch size per device that trains; other arguments go to each probe "
        "(python -m dlbench.harness: --framework, --model, --topology, --memory-limit-gb, ...).",
    )
    p.add_argument("--out", required=True, help="the result (JSON); probe logs go to <out>.probes/")
    p.add_argument("--search-id", default="", help="what the result is for (the search's id)")
    p.add_argument("--multiple", type=_positive, default=1, help="probe multiples of this (batch_size_multiple)")
    p.add_argument("--max-batch-size", type=_positive, default=None, help="the cap (max_batch_size)")
    p.add_argument(
        "--probe-steps", type=_positive, default=2, help="measured steps of each probe (after one warm-up step)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args, harness_args = parser().parse_known_args(argv)
    own = sorted({a.split("=")[0] for a in harness_args} & set(OWN_ARGS))
    if own:
        raise SystemExit(f"batchsearch: {', '.join(own)} is set by the search itself")
    out = Path(args.out)
    probes_dir = out.with_name(out.name + ".probes")
    shutil.rmtree(probes_dir, ignore_errors=True)
    probes_dir.mkdir(parents=True)
    started = utc_now()
    result = search(harness_probe(harness_args, probes_dir, args.probe_steps), args.multiple, args.max_batch_size)
    memory_limit = next(
        (float(v) for k, v in zip(harness_args, harness_args[1:], strict=False) if k == "--memory-limit-gb"), 0.0
    )
    document = {
        "search_id": args.search_id,
        **result,
        "multiple": args.multiple,
        "max_batch_size": args.max_batch_size,
        "probe_steps": args.probe_steps,
        "memory_limit_gb": memory_limit or None,
        "harness_args": harness_args,
        "started_at": started,
        "finished_at": utc_now(),
    }
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(
        f"[dlbench] batch-size search {args.search_id}: {result['status']}"
        + (f", max {result['batch_size']}" if result["status"] == "ok" else "")
        + f" ({result['reason']})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
