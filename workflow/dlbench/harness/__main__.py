"""`python -m dlbench.harness ...`: supervise one benchmark run (standard library only).

Writes the log header, starts the ranks (local processes, or `srun` inside a SLURM job), enforces the
time limit and makes sure the log ends with a summary whatever happens to the ranks (a crash, a kill,
a hang): a failed run is a record, not a missing file. Exits 0 once the record is written, so the
study goes on.

Retries (Snakemake's `--retries`, e.g. in the SLURM profile): a try that ends in `timeout` or
`failed` exits non-zero while tries are left, so Snakemake runs it again. Every try is noted in
`<log stem>.attempts.jsonl` beside the log. A try that SLURM kills (time limit, scancel, lost node)
cannot write a record that Snakemake keeps, so the last try after failed ones runs nothing: it
writes the failure record from those notes, with each try's SLURM job and state.

Hard faults: the log is written as `<log>.partial` and renamed to its name only when the run is
complete, so an interrupted run never leaves a log that looks finished. No process outlives its
owner (dlbench.harness.lifeline): when the supervisor or the Snakemake that started it dies, even
by SIGKILL, its ranks (or a runner's command) are killed with everything they started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from .. import __version__, layout
from . import lifeline, nodes, nospace, runner, strategies, sysinfo
from .runlog import LOG_SCHEMA_VERSION, append_line, failure_summary, last_line_type, partial_path, utc_now
from .spec import TELEMETRY_PYTHON_ENV, RunSpec, Unsupported, parser, spec_from_args

GRACE_S = 30.0  # after one rank fails, how long the others get to finish on their own
RETRIED = ("timeout", "failed")  # statuses worth another try; oom/unsupported/error are deterministic


def cpu_shares(cpus: list[int], ranks: int) -> list[list[int]]:
    """Split this node's cores into equal, disjoint shares, one per local rank (at least one each)."""
    per_rank = max(1, len(cpus) // ranks)
    return [[cpus[(r * per_rank + i) % len(cpus)] for i in range(per_rank)] for r in range(ranks)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def slurm_job_state() -> str | None:
    """The SLURM state of this job (e.g. TIMEOUT, CANCELLED), read when we are being stopped."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    for field in out.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


def header(spec: RunSpec, launcher: str, cpus: list[int], shares: list[list[int]], threads: int) -> dict:
    return {
        "type": "header",
        "schema_version": LOG_SCHEMA_VERSION,
        "run_id": spec.run_id,
        "config_id": spec.config_id,
        "config": {**spec.as_dict(), "topology": spec.topology, "world_size": spec.world_size},
        "started_at": utc_now(),
        "hostname": sysinfo.hostname(),
        "python": sysinfo.python_version(),
        "cpu_model": sysinfo.cpu_model(),
        "machine": sysinfo.machine(),
        "cpus": cpus,
        "cpu_shares": shares,
        "threads_per_rank": threads,
        "launcher": launcher,
        "attempt": spec.attempt,
        "slurm": sysinfo.slurm_info(),
        "git_commit": sysinfo.git_commit(),
        "dlbench_version": __version__,
        "argv": sys.argv,
    }


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


class Attempts:
    """Notes on every try of a run, kept beside its log (Snakemake deletes the log of a failed try). The file is
    only ever appended to: a try killed with its Snakemake (a start without an end) stays in it when the run is
    started again. A series of tries begins at the start of try 1; the failure record reads the current one."""

    def __init__(self, log: Path) -> None:
        self.path = log.with_name(log.name.removesuffix(".jsonl") + ".attempts.jsonl")

    def note(self, **entry: object) -> None:
        slurm = sysinfo.slurm_info() or {}
        append_line(
            self.path,
            {"time": utc_now(), "slurm_job_id": slurm.get("job_id"), "nodelist": slurm.get("nodelist"), **entry},
        )

    def entries(self) -> list[dict]:
        """The notes of the current series of tries: from the last start of try 1 on."""
        if not self.path.exists():
            return []
        notes = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        firsts = [i for i, e in enumerate(notes) if e.get("event") == "start" and e.get("attempt") == 1]
        return notes[firsts[-1] :] if firsts else notes

    def failure_record(self, tries: int) -> dict:
        """The summary of a run none of whose tries completed. A try's SLURM state comes from
        accounting once the job is over (when it was stopped, it often read COMPLETING)."""
        ends = {e["attempt"]: e for e in self.entries() if e.get("event") == "end"}
        starts = [e for e in self.entries() if e.get("event") == "start"]
        parts, states, status = [], [], "failed"
        for start in starts:
            end, job = ends.get(start["attempt"], {}), start.get("slurm_job_id")
            state = (sysinfo.slurm_final_state(job) if job else None) or end.get("slurm_state")
            states.append(state)
            if end.get("status") == "timeout" or state == "TIMEOUT":
                status = "timeout"
            where = f"SLURM job {job} on {start['nodelist']}" if job else "local"
            outcome = state or (end.get("status") or "no record: the job was killed or lost").upper()
            detail = f" - {end['error']}" if end.get("error") else ""
            parts.append(f"try {start['attempt']} ({where}): {outcome}{detail}")
        message = f"none of {tries} tries completed: " + "; ".join(parts)
        return failure_summary(status, message, attempts=len(starts), slurm_states=states)


class StderrRelay:
    """Copies a rank's stderr to ours line by line, noting whether the C++ runtime said it could not allocate
    memory: a framework that aborts on std::bad_alloc (TensorFlow under an address-space limit) ran out of memory,
    and its record says oom, not error."""

    MARKERS = (b"std::bad_alloc",)

    def __init__(self, proc: subprocess.Popen) -> None:
        self.alloc_failure = False
        self.thread = threading.Thread(target=self._relay, args=(proc.stderr,), daemon=True)
        self.thread.start()

    def _relay(self, stream) -> None:
        for line in stream:
            self.alloc_failure = self.alloc_failure or any(m in line for m in self.MARKERS)
            sys.stderr.buffer.write(line)
            sys.stderr.flush()

    def saw_alloc_failure(self) -> bool:
        self.thread.join(timeout=10)  # the rank has ended: its last lines are on their way
        return self.alloc_failure


RELAYS: dict[int, StderrRelay] = {}  # by rank process id


def start_local_ranks(spec: RunSpec, shares: list[list[int]], rank_dir: Path) -> list[subprocess.Popen]:
    port = str(free_port())
    procs = []
    for rank in range(spec.world_size):
        env = dict(
            os.environ,
            DLBENCH_RANK=str(rank),
            DLBENCH_WORLD_SIZE=str(spec.world_size),
            DLBENCH_LOCAL_RANK=str(rank),
            DLBENCH_LOCAL_WORLD_SIZE=str(spec.world_size),
            DLBENCH_CPUS=",".join(map(str, shares[rank])),
            DLBENCH_RANK_DIR=str(rank_dir),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS=str(len(shares[rank])),
            MKL_NUM_THREADS=str(len(shares[rank])),
        )
        cmd = [sys.executable, "-m", "dlbench.harness.rank", *spec.to_args()]
        procs.append(
            subprocess.Popen(
                cmd, env=env, start_new_session=True, preexec_fn=lifeline.die_with_parent(), stderr=subprocess.PIPE
            )
        )
        RELAYS[procs[-1].pid] = StderrRelay(procs[-1])
    return procs


def start_srun_ranks(spec: RunSpec, cpus_per_task: int, rank_dir: Path) -> list[subprocess.Popen]:
    """All ranks as one job step: srun starts one task per device on every node of the allocation."""
    nodelist = (sysinfo.slurm_info() or {}).get("nodelist", "")
    env = dict(
        os.environ,
        DLBENCH_RANK_DIR=str(rank_dir),
        MASTER_ADDR=sysinfo.slurm_hostnames(nodelist)[0],
        MASTER_PORT=str(free_port()),
        OMP_NUM_THREADS=str(cpus_per_task),
        MKL_NUM_THREADS=str(cpus_per_task),
    )
    for inherited in ("DLBENCH_RANK", "DLBENCH_WORLD_SIZE", "DLBENCH_LOCAL_RANK", "DLBENCH_CPUS"):
        env.pop(inherited, None)
    cmd = [
        "srun",
        f"--nodes={spec.nodes}",
        f"--ntasks={spec.world_size}",
        f"--ntasks-per-node={spec.devices_per_node}",
        f"--cpus-per-task={cpus_per_task}",
        "--kill-on-bad-exit=0",
        "--export=ALL",
        sys.executable,
        "-m",
        "dlbench.harness.rank",
        *spec.to_args(),
    ]
    print("[dlbench] " + " ".join(cmd[:7]), file=sys.stderr)
    # SIGTERM, not SIGKILL: srun cancels its step on SIGTERM, a killed srun may leave the step running.
    return [subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=lifeline.die_with_parent(signal.SIGTERM))]


def stop(procs: list[subprocess.Popen], signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGKILL)) -> None:
    """SIGTERM each rank's whole process group, then SIGKILL what is left. A lost node: SIGKILL alone (srun would
    spend its grace waiting for the dead node's part of the step, and SLURM may end the job meanwhile)."""
    for sig in signals:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.1)


def start_sampler(
    spec: RunSpec, log: Path, launcher: str, procs: list[subprocess.Popen]
) -> subprocess.Popen | str | None:
    """The telemetry sampler (dlbench.telemetry.sampler), a separate core-environment process so that nothing of
    it runs in the ranks: locally one for the ranks' process trees, under srun one per node (an overlapping
    step) that finds the ranks by the log path in their command line. None: telemetry off; a text: why not."""
    python = os.environ.get(TELEMETRY_PYTHON_ENV, "")
    if spec.telemetry_ms <= 0:
        return None
    if not python:
        return f"${TELEMETRY_PYTHON_ENV} is not set (the core environment's python, which runs the sampler)"
    out = telemetry_dir(log)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    package = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=package + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        python,
        "-m",
        "dlbench.telemetry.sampler",
        "--interval-ms",
        str(spec.telemetry_ms),
        "--out",
        str(out / "{host}.jsonl"),
    ]
    if launcher == "srun":
        cmd = [
            "srun",
            "--overlap",
            f"--nodes={spec.nodes}",
            f"--ntasks={spec.nodes}",
            "--ntasks-per-node=1",
            *cmd,
            "--match",
            str(log),
        ]
    else:
        cmd += ["--pids", ",".join(str(p.pid) for p in procs), "--parent", str(os.getpid())]
    return subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=lifeline.die_with_parent(signal.SIGTERM))


def telemetry_dir(log: Path) -> Path:
    return log.with_name(log.name + ".telemetry")


def stop_sampler(sampler: subprocess.Popen | str | None, log: Path, hard: bool = False) -> None:
    """Stop the sampler and move its lines into the log as `telemetry` lines, before the summary if there is one;
    a sampler that could not start or wrote nothing leaves one line saying why."""
    if sampler is None:
        return
    if isinstance(sampler, str):
        insert_before_summary(log, [json.dumps({"type": "telemetry", "kind": "unavailable", "why": sampler})])
        return
    if sampler.poll() is None:
        os.killpg(sampler.pid, signal.SIGKILL if hard else signal.SIGTERM)  # hard: a node was lost (see stop)
        try:
            sampler.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(sampler.pid, signal.SIGKILL)
            sampler.wait()
    lines = []
    for path in sorted(telemetry_dir(log).glob("*.jsonl")):
        host = path.stem
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            host = entry.get("host", host)
            lines.append(json.dumps({"type": "telemetry", "host": host, **entry}, separators=(",", ":")))
    shutil.rmtree(telemetry_dir(log), ignore_errors=True)
    if not lines:
        why = f"the sampler wrote nothing (exit status {sampler.returncode}; see the rule's log)"
        lines = [json.dumps({"type": "telemetry", "kind": "unavailable", "why": why})]
    insert_before_summary(log, lines)


def insert_before_summary(log: Path, lines: list[str]) -> None:
    """The partial log rewritten with `lines` before its summary (the summary stays the last line)."""
    existing = log.read_text(encoding="utf-8").splitlines()
    tail = [existing.pop()] if existing and last_line_type(log) == "summary" else []
    rewrite(log, [*existing, *lines, *tail])


def rewrite(log: Path, lines: list[str]) -> None:
    """The partial log with exactly these lines, replaced at once (a kill never leaves half a log)."""
    tmp = log.with_name(log.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, log)


def supervise(
    spec: RunSpec, procs: list[subprocess.Popen], rank_dir: Path | None = None, watch: nodes.NodeWatch | None = None
) -> tuple[str | None, str]:
    """Wait for the ranks. Returns (status, message) of a failure the ranks could not report. Under srun (one
    process for all ranks) a rank's failure shows as its report in `rank_dir`; `watch`: the other nodes of a
    multi-node allocation, whose loss ends the run at once (status failed: worth another try)."""
    deadline = time.monotonic() + spec.timeout_s if spec.timeout_s > 0 else None
    failed_at = None
    next_report_check = 0.0
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if deadline is not None and now > deadline:
            stop(procs)
            return "timeout", f"run exceeded its time limit of {spec.timeout_s:g} s"
        if watch is not None and (lost := watch.check()):
            print(f"[dlbench] {'; '.join(n.describe() for n in lost)}: stopping the ranks", file=sys.stderr)
            stop(procs, (signal.SIGKILL,))
            return "failed", "; ".join(n.describe() for n in lost)
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now  # the others may hang in a collective: give them a grace period
        if failed_at is None and rank_dir is not None and now >= next_report_check:
            next_report_check = now + 1.0
            failed_at = now if rank_failures(rank_dir) else None
        if failed_at is not None and now - failed_at > GRACE_S:
            left = [rank for rank, p in enumerate(procs) if p.poll() is None]
            what = "the srun step" if rank_dir is not None else f"rank(s) {', '.join(map(str, left))}"
            print(
                f"[dlbench] stopping {what}: still running {GRACE_S:g} s after a rank failed (hanging in a "
                "collective?)",
                file=sys.stderr,
            )
            stop(procs)
            break
        time.sleep(0.1)
    codes = [p.returncode for p in procs]
    bad = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if not bad:
        return None, ""
    rank, code = bad[0]
    relay = RELAYS.get(procs[rank].pid)
    if code == -signal.SIGABRT and relay is not None and relay.saw_alloc_failure():
        return "oom", f"rank {rank} aborted on std::bad_alloc: the framework could not allocate memory"
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    hint = " (SIGKILL: possibly the kernel's out-of-memory killer)" if code == -signal.SIGKILL else ""
    return "error", f"rank {rank} {how}{hint}; see the rule's log for its output"


def replace_summary(log: Path, summary: dict) -> None:
    """The partial log with `summary` as its last line, instead of the summary rank 0 may have written."""
    lines = log.read_text(encoding="utf-8").splitlines()
    if lines and last_line_type(log) == "summary":
        lines.pop()
    rewrite(log, [*lines, json.dumps(summary, separators=(",", ":"))])


def node_watch(spec: RunSpec, launcher: str) -> nodes.NodeWatch | None:
    """The watch over the other nodes of a multi-node srun run (this process runs on the first)."""
    if launcher != "srun" or spec.nodes < 2:
        return None
    return nodes.NodeWatch.for_allocation((sysinfo.slurm_info() or {}).get("nodelist", ""), sysinfo.hostname())


def oom_elsewhere(log: Path, reports: list[dict]) -> None:
    """Rank 0 failed with an error because another rank ran out of memory (its collective broke off): the run
    ran out of memory, and the summary says so, with the rank that did and rank 0's own error."""
    summary = json.loads(log.read_text(encoding="utf-8").splitlines()[-1])
    oom = next((r for r in reports if r.get("status") == "oom"), None)
    if summary.get("status") != "error" or oom is None:
        return
    message = f"rank {oom['rank']}: {oom['error']} (rank 0: {summary.get('error', '')})"[:4000]
    replace_summary(log, failure_summary("oom", message, memory=oom.get("memory")))


def run_external(spec: RunSpec, log: Path, threads: int, procs: list[subprocess.Popen], guard: lifeline.Guard) -> None:
    """A runner's command instead of our ranks, under the same time limit; its summary names the log to parse.
    `log` is the partial log written now; the runner's directory is named after the final one (spec.log)."""
    definition = runner.load(spec.runner)
    directory = runner.run_dir(Path(spec.log))
    shutil.rmtree(directory, ignore_errors=True)
    started = time.monotonic()
    try:
        procs.append(runner.start(spec, definition, directory, threads))
        guard.watch(procs[-1].pid)
    except Unsupported as reason:
        append_line(log, failure_summary("unsupported", str(reason)))
        return
    except runner.CannotStart as reason:  # a failure like any other: a record, the supervisor goes on
        append_line(log, failure_summary("error", str(reason)))
        return
    status, message = supervise(spec, procs)
    if spec.telemetry_ms > 0:  # the sampler summarises over rank 0's measured window, which a runner has not
        append_line(log, {"type": "telemetry", "kind": "unavailable", "why": runner.NO_TELEMETRY})
    if status == "timeout":
        append_line(log, failure_summary(status, message))
        return
    result = runner.outcome(spec, definition, directory, procs[0].returncode)
    append_line(
        log,
        {
            "type": "summary",
            **result,
            "elapsed_s": time.monotonic() - started,
            "world_size": spec.world_size,
            "finished_at": utc_now(),
        },
    )


def choose_launcher(spec: RunSpec) -> str:
    if spec.launcher != "auto":
        return spec.launcher
    return "srun" if "SLURM_JOB_ID" in os.environ and spec.world_size > 1 else "local"


def main(argv: list[str] | None = None) -> int:
    spec = spec_from_args(parser("python -m dlbench.harness").parse_args(argv))
    try:
        return supervise_run(spec)
    except OSError as error:
        if not nospace.is_no_space(error):
            raise
        kept = "this run is not recorded, the runs finished before are kept"
        print(f"[dlbench] {spec.run_id}: {nospace.message(error, partial_path(Path(spec.log)), kept)}", file=sys.stderr)
        return 1


def supervise_run(spec: RunSpec) -> int:
    """The run's log complete under its name (0), or the exit status of a try that Snakemake should retry."""
    final = Path(spec.log)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        lifeline.hold_run(final)  # until this process and its guard are gone
    except lifeline.RunBusy as busy:
        print(f"[dlbench] {spec.run_id}: {busy}", file=sys.stderr)
        return 1
    final.unlink(missing_ok=True)
    log = partial_path(final)  # what this run writes; renamed to `final` once complete
    log.unlink(missing_ok=True)
    guard = lifeline.Guard()  # before any child and any signal handler
    try:
        code = run(spec, log, guard)
    finally:
        guard.release()
    if code == 0:
        os.replace(log, final)
        print(f"[dlbench] {spec.run_id}: wrote {final}", file=sys.stderr)
    return code


def run(spec: RunSpec, log: Path, guard: lifeline.Guard) -> int:
    """The run, its log written to `log` (the partial file). Returns the exit status; 0 = the record is complete."""
    final = Path(spec.log)
    rank_dir = final.with_name(final.name + ".ranks")
    shutil.rmtree(rank_dir, ignore_errors=True)
    attempts = Attempts(final)

    launcher = choose_launcher(spec)
    cpus = sysinfo.usable_cpus()
    if spec.cpus > 0:
        cpus = cpus[: spec.cpus]
    if launcher == "srun":
        per_task = int(os.environ.get("SLURM_CPUS_PER_TASK", "1"))
        shares, threads = [], per_task
    else:
        shares = cpu_shares(cpus, spec.devices_per_node)
        threads = len(shares[0])
    append_line(log, header(spec, launcher, cpus, shares, threads))

    if spec.attempt > 1 and spec.attempt >= spec.max_attempts and attempts.entries():
        # The last try after failed ones: record the failure instead of failing once more.
        append_line(log, attempts.failure_record(spec.attempt - 1))
        print(f"[dlbench] {spec.run_id}: no try completed; writing the failure record", file=sys.stderr)
        return 0
    attempts.note(attempt=spec.attempt, event="start")
    rank_dir.mkdir()
    print(
        f"[dlbench] {spec.run_id}: {spec.world_size} rank(s) via {launcher}, {threads} core(s) each, "
        f"try {spec.attempt}/{spec.max_attempts}",
        file=sys.stderr,
    )

    # SIGTERM (scancel, a SLURM time limit, Snakemake stopping) still leaves a record and a note.
    procs: list[subprocess.Popen] = []
    samplers: list[subprocess.Popen | str] = []  # the telemetry sampler, stopped here too when we are stopped

    def on_term(signum: int, _frame: object) -> None:
        state = slurm_job_state()
        stop(procs)
        for sampler in samplers:
            stop_sampler(sampler, log)
        status = "timeout" if state == "TIMEOUT" else "failed"
        message = f"run terminated by signal {signum}" + (f" (SLURM job state {state})" if state else "")
        attempts.note(attempt=spec.attempt, event="end", status=status, slurm_state=state, error=message)
        if last_line_type(log) != "summary":
            append_line(log, failure_summary(status, message, slurm_state=state))
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # Ctrl-C reaches the supervisor, not the ranks (own sessions)

    changed = layout.changed_since_verification(Path(spec.data_dir)) if spec.data == "real" and spec.data_dir else []
    if changed:  # the data a run would read must be the data that was verified
        append_line(
            log,
            failure_summary(
                "error",
                "the prepared data changed after it was verified: "
                + "; ".join(changed[:5])
                + " - verify it again (snakemake --forcerun "
                "verify_imagenet or verify_bert), which names the bad record",
            ),
        )
    elif reason := strategies.problem(spec.framework, spec.strategy, spec.world_size):
        append_line(log, failure_summary("unsupported", reason))  # decided before any rank starts
    elif reason := sysinfo.emulated_bf16_skipped(spec.precision, spec.device, spec.emulated_bf16):
        append_line(log, failure_summary("unsupported", reason))
    elif spec.runner:
        run_external(spec, log, threads, procs, guard)
    elif spec.nodes > 1 and launcher != "srun":
        append_line(
            log,
            failure_summary(
                "unsupported",
                f"topology {spec.topology} spans {spec.nodes} nodes: multi-node runs need a "
                "SLURM allocation (snakemake --profile slurm)",
            ),
        )
    else:
        ranks_spec = replace(spec, log=str(log))  # rank 0 appends to the partial log
        if launcher == "srun":
            procs.extend(start_srun_ranks(ranks_spec, threads, rank_dir))
        else:
            procs.extend(start_local_ranks(ranks_spec, shares, rank_dir))
        for p in procs:
            guard.watch(p.pid)  # each child leads its own process group
        sampler = start_sampler(spec, log, launcher, procs)
        if isinstance(sampler, subprocess.Popen):
            guard.watch(sampler.pid)
        samplers.extend([sampler] if sampler is not None else [])
        watch = node_watch(spec, launcher)
        status, message = supervise(spec, procs, rank_dir if launcher == "srun" else None, watch)
        samplers.clear()
        stop_sampler(sampler, log, hard=watch is not None and bool(watch.lost))
        reports = rank_failures(rank_dir)
        if watch is not None and watch.lost:  # whatever the surviving ranks said, the node's loss ended the run
            first_error = f"; rank {reports[0]['rank']}: {reports[0]['error'][:500]}" if reports else ""
            replace_summary(
                log,
                failure_summary(
                    "failed",
                    message + first_error,
                    lost_nodes=[
                        {"node": n.node, "state": n.state, "reason": n.reason, "why": n.why} for n in watch.lost
                    ],
                ),
            )
        elif last_line_type(log) != "summary":
            if status == "timeout" or not reports:
                append_line(log, failure_summary(status or "error", message or "no summary was written"))
            else:
                first = reports[0]
                append_line(
                    log,
                    failure_summary(
                        first["status"], f"rank {first['rank']}: {first['error']}", memory=first.get("memory")
                    ),
                )
        else:
            oom_elsewhere(log, reports)
    shutil.rmtree(rank_dir, ignore_errors=True)

    summary = json.loads(log.read_text().splitlines()[-1])
    attempts.note(attempt=spec.attempt, event="end", status=summary["status"], error=summary.get("error", ""))
    if summary["status"] in RETRIED and spec.attempt < spec.max_attempts:
        print(
            f"[dlbench] {spec.run_id}: {summary['status']} on try {spec.attempt}/{spec.max_attempts}; "
            "exiting non-zero so Snakemake tries again",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
