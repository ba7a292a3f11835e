"""`python -m dlbench.harness ...`: supervise one benchmark run (standard library only).

Writes the log header, starts the ranks, enforces the time limit and makes sure the log ends with a
summary whatever happens to the ranks (a crash, a kill, a hang): a failed run is a record, not a
missing file. Exits 0 once the record is written, so the study goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import sysinfo
from .spec import LOG_SCHEMA_VERSION, RunSpec, append_line, last_line_type, parser, spec_from_args, utc_now

GRACE_S = 30.0  # after one rank fails, how long the others get to finish on their own


def cpu_shares(cpus: list[int], ranks: int) -> list[list[int]]:
    """Split this node's cores into equal, disjoint shares, one per local rank (at least one each)."""
    per_rank = max(1, len(cpus) // ranks)
    return [[cpus[(r * per_rank + i) % len(cpus)] for i in range(per_rank)] for r in range(ranks)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def header(spec: RunSpec, cpus: list[int], shares: list[list[int]], launcher: str) -> dict:
    return {
        "type": "header",
        "schema_version": LOG_SCHEMA_VERSION,
        "run_id": spec.run_id,
        "config_id": spec.config_id,
        "config": {**spec.__dict__, "topology": spec.topology, "world_size": spec.world_size},
        "started_at": utc_now(),
        "hostname": sysinfo.hostname(),
        "python": sysinfo.python_version(),
        "cpu_model": sysinfo.cpu_model(),
        "cpus": cpus,
        "cpu_shares": shares,
        "threads_per_rank": len(shares[0]),
        "launcher": launcher,
        "slurm": sysinfo.slurm_info(),
        "git_commit": sysinfo.git_commit(),
        "argv": sys.argv,
    }


def failure_summary(status: str, message: str, **extra: object) -> dict:
    return {"type": "summary", "status": status, "error": message, "finished_at": utc_now(), **extra}


def rank_failures(rank_dir: Path) -> list[dict]:
    """Failure reports the ranks wrote before exiting, in rank order."""
    reports = []
    for path in sorted(rank_dir.glob("rank*.json"), key=lambda p: int(p.stem[4:])):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if report.get("status") != "ok":
            reports.append(report)
    return reports


def start_local_ranks(spec: RunSpec, shares: list[list[int]], rank_dir: Path) -> list[subprocess.Popen]:
    port = str(free_port())
    procs = []
    for rank in range(spec.world_size):
        env = dict(
            os.environ,
            DLBENCH_RANK=str(rank), DLBENCH_WORLD_SIZE=str(spec.world_size),
            DLBENCH_LOCAL_RANK=str(rank), DLBENCH_LOCAL_WORLD_SIZE=str(spec.world_size),
            DLBENCH_CPUS=",".join(map(str, shares[rank])), DLBENCH_RANK_DIR=str(rank_dir),
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
            OMP_NUM_THREADS=str(len(shares[rank])), MKL_NUM_THREADS=str(len(shares[rank])),
        )
        cmd = [sys.executable, "-m", "dlbench.harness.rank", *spec.to_args()]
        procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each rank's whole process group, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.1)


def supervise(spec: RunSpec, procs: list[subprocess.Popen]) -> tuple[str | None, str]:
    """Wait for the ranks. Returns (status, message) of a failure the ranks could not report."""
    deadline = time.monotonic() + spec.timeout_s if spec.timeout_s > 0 else None
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if deadline is not None and now > deadline:
            stop(procs)
            return "timeout", f"run exceeded its time limit of {spec.timeout_s:g} s"
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now  # the others may hang in a collective: give them a grace period
        if failed_at is not None and now - failed_at > GRACE_S:
            stop(procs)
            break
        time.sleep(0.1)
    codes = [p.returncode for p in procs]
    bad = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if not bad:
        return None, ""
    rank, code = bad[0]
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    hint = " (SIGKILL: possibly the kernel's out-of-memory killer)" if code == -signal.SIGKILL else ""
    return "error", f"rank {rank} {how}{hint}; see the rule's log for its output"


def main(argv: list[str] | None = None) -> int:
    spec = spec_from_args(parser("python -m dlbench.harness").parse_args(argv))
    log = Path(spec.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    rank_dir = log.with_name(log.name + ".ranks")
    shutil.rmtree(rank_dir, ignore_errors=True)
    rank_dir.mkdir()

    cpus = sysinfo.usable_cpus()
    if spec.cpus > 0:
        cpus = cpus[: spec.cpus]
    shares = cpu_shares(cpus, spec.devices_per_node)
    append_line(log, header(spec, cpus, shares, launcher="local"))
    print(f"[dlbench] {spec.run_id}: {spec.world_size} rank(s), {len(shares[0])} core(s) each", file=sys.stderr)

    # SIGTERM (scancel, a SLURM time limit, Snakemake stopping) still leaves a record.
    procs: list[subprocess.Popen] = []

    def on_term(signum: int, _frame: object) -> None:
        stop(procs)
        if last_line_type(log) != "summary":
            append_line(log, failure_summary("failed", f"run terminated by signal {signum}"))
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)

    if spec.nodes > 1:
        append_line(log, failure_summary(
            "unsupported", f"topology {spec.topology} spans {spec.nodes} nodes: multi-node runs need a "
            "SLURM allocation (snakemake --profile slurm)"))
    else:
        procs.extend(start_local_ranks(spec, shares, rank_dir))
        status, message = supervise(spec, procs)
        if last_line_type(log) != "summary":
            reports = rank_failures(rank_dir)
            if status == "timeout" or not reports:
                append_line(log, failure_summary(status or "error", message or "no summary was written"))
            else:
                first = reports[0]
                append_line(log, failure_summary(first["status"], f"rank {first['rank']}: {first['error']}"))
    shutil.rmtree(rank_dir, ignore_errors=True)
    print(f"[dlbench] {spec.run_id}: wrote {log}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
