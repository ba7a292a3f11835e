"""Node loss: how soon after a node dies mid-run its failure record exists, against when SLURM itself notices.

    .venv/bin/python benchmarks/node_loss.py [--trials 3]      # root and apt-get: starts the two-node test cluster

On the two-node test cluster (tests/slurm/slurm-local.sh with SLURM_NODES=2: each slurmd in its own network
namespace, SlurmdTimeout 30 s), each trial runs a study of one PyTorch 2x1 ResNet-50 run (32 px, batch 2, 400
measured steps, time limit 5 minutes) through `snakemake --profile slurm --retries 0`. As soon as the run's log
shows its warm-up, `slurm-local.sh lose-node dlb-n2` SIGKILLs that node's slurmd and rank. From that moment:

- record: the run's log has its summary line naming the lost node (`lost_nodes`), written by the harness's node
  watch on the first node;
- SLURM: `sinfo` first shows the node as not responding or down — the baseline, SLURM's own detection;
- workflow: the study's `snakemake` has ended (aggregate and report included; it must end 0).

Target: the record well before SLURM's notice (record ÷ SLURM < 1) and far inside the run's time limit (without the
watch, the surviving rank waits in a collective until the limit). The node is restored after every trial.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from resultfile import REPO, Recorder, table

from dlbench.collect.records import LogError
from dlbench.logformats.runlogs import read_run
from dlbench.vocabulary import identity

CLUSTER = REPO / "tests" / "slurm" / "slurm-local.sh"
NODE = "dlb-n2"
TIME_LIMIT_MIN = 5
# the study's one configuration; its run log's path follows from it
AXES = {
    "framework": "pytorch",
    "model": "resnet50",
    "topology": "2x1",
    "precision": "fp32",
    "compiler": False,
    "data": "synthetic",
    "batch_size": 2,
    "image_size": 32,
}
RUN_LOG = identity.run_log(identity.config_id(AXES), 1)


def cluster(*args: str, timeout: float = 900, check: bool = True) -> None:
    subprocess.run(
        ["bash", str(CLUSTER), *args],
        env=dict(os.environ, SLURM_NODES="2"),
        check=check,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


def study() -> dict:
    matrix = {axis: [value] for axis, value in AXES.items() if axis != "image_size"}
    return {
        "study": "node-loss",
        "software": {"venv_dir": str(REPO / ".venvs")},
        "platform": {"device": "cpu"},
        "defaults": {
            "repeats": 1,
            "warmup_steps": 1,
            "measured_steps": 400,
            "image_size": AXES["image_size"],
            "timeout_minutes": TIME_LIMIT_MIN,
        },
        "matrix": matrix,
    }


def summary_with_lost_node(work: Path) -> dict | None:
    """The run's summary line once it names a lost node (in the partial log or the finished one)."""
    for path in (work / f"{RUN_LOG}.partial", work / RUN_LOG):
        try:
            summary = read_run(path)[2]
        except (OSError, LogError):  # not there yet, or a line half written
            continue
        if summary and summary.get("lost_nodes"):
            return summary
    return None


def slurm_noticed() -> bool:
    """sinfo's state of the node: '*' = not responding; down/fail = marked so."""
    state = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    return "*" in state or state.startswith(("down", "fail"))


def trial(work: Path) -> dict:
    work.mkdir(parents=True)
    (work / "slurm").symlink_to(REPO / "profiles" / "slurm")
    config = work / "study.yaml"
    config.write_text(yaml.safe_dump(study(), sort_keys=False))
    with open(work / "snakemake.err", "w") as err:
        workflow = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snakemake",
                "-s",
                str(REPO / "Snakefile"),
                "--profile",
                "slurm",
                "--cores",
                "all",
                "--retries",
                "0",
                "--configfile",
                str(config),
            ],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    found: dict = {}
    try:
        deadline = time.monotonic() + TIME_LIMIT_MIN * 60 + 300
        partial = work / f"{RUN_LOG}.partial"
        while time.monotonic() < deadline and workflow.poll() is None:  # wait for the warm-up, then kill the node
            if partial.exists() and '"phase":"warmup"' in partial.read_text().replace(" ", ""):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"the run never reached its warm-up; see {work / 'snakemake.err'}")
        cluster("lose-node", NODE)
        lost = time.monotonic()

        def watch_slurm() -> None:
            while time.monotonic() < deadline and not slurm_noticed():
                time.sleep(0.25)
            found["slurm_s"] = time.monotonic() - lost

        slurm = threading.Thread(target=watch_slurm, daemon=True)
        slurm.start()
        while time.monotonic() < deadline and "record_s" not in found:
            if (summary := summary_with_lost_node(work)) is not None:
                found["record_s"], found["summary"] = time.monotonic() - lost, summary
            time.sleep(0.05)
        found["rc"] = workflow.wait(timeout=max(1.0, deadline - time.monotonic()))
        found["workflow_s"] = time.monotonic() - lost
        slurm.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if workflow.poll() is None:
            workflow.kill()
        cluster("restore-node", NODE, timeout=120)
    if found.get("rc") != 0 or "record_s" not in found or "slurm_s" not in found:
        raise SystemExit(
            f"trial failed: { ({k: v for k, v in found.items() if k != 'summary'}) }; see {work / 'snakemake.err'}"
        )
    return found


def timing_cells(times: dict) -> list[str]:
    """record, SLURM, record ÷ SLURM and workflow seconds of a trial (or of the trials' medians), as table cells."""
    return [
        f"{times['record_s']:.1f}",
        f"{times['slurm_s']:.1f}",
        f"{times['record_s'] / times['slurm_s']:.2f}",
        f"{times['workflow_s']:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the trials' work directories")
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit("node_loss.py starts the two-node test cluster: it needs root and apt-get (Debian/Ubuntu)")
    record = Recorder(__file__)
    print("starting the two-node test cluster ...", flush=True)
    cluster("start")
    rows, results = [], []
    root = Path(tempfile.mkdtemp(prefix="dlbench-node-loss-"))
    try:
        for n in range(1, args.trials + 1):
            found = trial(root / f"trial{n}")
            results.append(found)
            state = found["summary"]["lost_nodes"][0].get("state") or "-"
            rows.append([n, *timing_cells(found), found["summary"]["status"], state])
            print(
                f"trial {n}: record {found['record_s']:.1f} s, SLURM {found['slurm_s']:.1f} s, workflow "
                f"{found['workflow_s']:.1f} s",
                flush=True,
            )
    finally:
        cluster("stop", timeout=300, check=False)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    median = {key: statistics.median(r[key] for r in results) for key in ("record_s", "slurm_s", "workflow_s")}
    rows.append(["median", *timing_cells(median), "", ""])
    title = (
        f"node loss: PyTorch 2x1 ResNet-50 on the two-node test cluster, {NODE} killed at the warm-up; seconds "
        "from the loss"
    )
    columns = [
        "trial",
        "failure record (s)",
        "SLURM notices (s)",
        "record ÷ SLURM",
        "workflow ends (s)",
        "record status",
        "SLURM node state in the record",
    ]
    print(f"\n{title}\n" + "\n".join(" | ".join(map(str, r)) for r in rows))
    record.write(
        [table(title, columns, rows)],
        notes=[
            f"target: the failure record before SLURM's own notice (record ÷ SLURM < 1) and far inside the run's "
            f"{TIME_LIMIT_MIN}-minute time limit",
            "the record: the harness's node watch on the first node (a TCP probe of every other node's slurmd "
            "every 2 s; refused = lost at once, 3 unanswered probes = lost); SLURM: sinfo polled every 0.25 s for a "
            "not-responding (*) or down state (SlurmdTimeout 30 s in the test cluster)",
            "workflow ends: snakemake exits 0 with the failure in the report (aggregate and report included); most of "
            "it is the SLURM executor plugin's wait between job-state polls (growing up to 180 s), not dlbench",
        ],
    )


if __name__ == "__main__":
    main()
