"""ImageNet -> TFRecords: our converter against the reference converter's figures (REFERENCE_IPS) and against a plain
read-and-write copy of the same files, measured in the same run.

    PYTHONPATH=workflow .venvs/dataprep-*/bin/python benchmarks/dataprep_imagenet.py [--wheels DIR] [--rounds 5]

The input is the issue's tree: 3,500 images (3,000 train in 10 synsets + 500 flat validation) cut from the
photos in scikit-image's wheel, ~109 kB per image (381 MB), one PNG named .JPEG and three CMYK JPEGs. It is
built once under --work and reused. Each round times, in alternating order, (a) the copy floor: one Python
process reading every file and writing it to a new file, and (b) `python -m dlbench.dataprep.imagenet convert`
with 2 workers into 8 train + 2 validation shards, as a whole process (interpreter start included, as the
reference's wall time is) and the conversion alone (the time it reports). Page cache warm, `sync` before each
timed run so neither pays for the other's write-back. Writes benchmarks/results/dataprep_imagenet.json (figures.py
renders it into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import resultfile  # benchmarks/, next to this script
from wheels import ensure_wheels  # benchmarks/: the sample wheels, downloaded once

REPO = Path(__file__).resolve().parents[1]
WHEELS = ("scikit-image==0.26.0", "tensorflow-datasets==4.9.10")
TREE = {"classes": 10, "train_per_class": 300, "validation_per_class": 50, "png": 1, "cmyk": 3}
# tensorflow/models build_imagenet_data.py, measured on the earlier 2-core VM
REFERENCE_IPS = (460, 540)  # tensorflow/models build_imagenet_data.py, 2 threads: 6.5-7.7 s wall
REFERENCE_RSS_MB = 520
FLOOR_ISSUE_S = (0.38, 0.61)

# runs the converter and reports its peak RSS (its own and its workers') on stderr
WRAPPER = """
import resource, sys
from dlbench.dataprep.imagenet import main
try:
    code = main(sys.argv[1:])
finally:
    print("maxrss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "workflow"))


def ensure_tree(wheels: Path, tree: Path) -> dict:
    info_path = tree / "sample.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if (info["train_images"], info["validation_images"], len(info["cmyk_jpeg"])) == (3000, 500, 3):
            return info
    print(f"building the 3,500-image tree in {tree} (about a minute) ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench.dataprep.sample_imagenet",
            "--wheels",
            str(wheels),
            "--out",
            str(tree),
            "--classes",
            str(TREE["classes"]),
            "--train-per-class",
            str(TREE["train_per_class"]),
            "--validation-per-class",
            str(TREE["validation_per_class"]),
            "--png",
            str(TREE["png"]),
            "--cmyk",
            str(TREE["cmyk"]),
        ],
        check=True,
        env=env(),
    )
    return json.loads(info_path.read_text())


def copy_floor(files: list[Path], dest: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one process copying every file."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    os.sync()
    start, cpu = time.perf_counter(), time.process_time()
    for i, path in enumerate(files):
        with open(path, "rb") as src, open(dest / str(i), "wb") as dst:
            dst.write(src.read())
    return time.perf_counter() - start, time.process_time() - cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def convert(tree: Path, out: Path, workers: int) -> tuple[float, float, float, int]:
    """(wall s, conversion s as reported, CPU s of all its processes, peak RSS kB of any one process)."""
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    start, cpu = time.perf_counter(), children_cpu()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WRAPPER,
            "convert",
            "--train-dir",
            str(tree / "train"),
            "--validation-dir",
            str(tree / "validation"),
            "--validation-labels",
            str(tree / "validation_labels.txt"),
            "--synsets",
            str(tree / "synsets.txt"),
            "--metadata",
            str(tree / "metadata.txt"),
            "--bounding-boxes",
            str(tree / "bounding_boxes.csv"),
            "--out",
            str(out),
            "--train-shards",
            "8",
            "--validation-shards",
            "2",
            "--workers",
            str(workers),
        ],
        env=env(),
        capture_output=True,
        text=True,
    )
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    if result.returncode != 0:
        sys.exit(f"convert failed:\n{result.stderr[-3000:]}")
    inner = float(re.search(r": ([\d.]+) s \(", result.stderr).group(1))
    rss = max(map(int, re.search(r"maxrss_kb (\d+) (\d+)", result.stderr).groups()))
    return wall, inner, cpu, rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wheels", type=Path, default=Path(os.environ.get("DLBENCH_WHEELS", "/tmp/dlbench-wheels")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlbench-bench-imagenet"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    record = resultfile.Recorder(__file__)

    args.wheels.mkdir(parents=True, exist_ok=True)
    ensure_wheels(args.wheels, list(WHEELS))
    tree = args.work / "tree"
    info = ensure_tree(args.wheels, tree)
    files = sorted(p for p in tree.rglob("*.JPEG"))
    total = sum(p.stat().st_size for p in files)
    for path in files:  # warm the page cache
        path.read_bytes()
    n = len(files)
    print(
        f"tree: {n:,} images ({info['train_images']:,} train + {info['validation_images']:,} validation), "
        f"{total / 1e6:.1f} MB, {total / n / 1e3:.1f} kB/image, {len(info['png_named_jpeg'])} PNG named .JPEG "
        f"+ {len(info['cmyk_jpeg'])} CMYK JPEGs"
    )

    floors, walls, inners, loads, rss = [], [], [], [os.getloadavg()[0]], 0
    copy_cpu, convert_cpu = [], []
    for r in range(args.rounds):
        order = ("copy", "convert") if r % 2 == 0 else ("convert", "copy")
        for what in order:
            if what == "copy":
                seconds, cpu = copy_floor(files, args.work / "copy")
                floors.append(seconds)
                copy_cpu.append(cpu)
            else:
                wall, inner, cpu, peak = convert(tree, args.work / "out", args.workers)
                walls.append(wall)
                convert_cpu.append(cpu)
                inners.append(inner)
                rss = max(rss, peak)
        loads.append(os.getloadavg()[0])
        print(
            f"round {r + 1}: copy {floors[-1]:.2f} s, convert {walls[-1]:.2f} s wall / {inners[-1]:.2f} s conversion",
            flush=True,
        )
    shutil.rmtree(args.work / "copy", ignore_errors=True)

    start = time.perf_counter()
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench.dataprep.imagenet",
            "verify",
            str(args.work / "out"),
            "--workers",
            str(args.workers),
        ],
        env=env(),
        capture_output=True,
        text=True,
    )
    verify_s = time.perf_counter() - start
    manifest = json.loads((args.work / "out" / "manifest.json").read_text())
    records = manifest["totals"]["records"]

    def ips(seconds: float) -> str:
        return f"{records / seconds:,.0f} images/s"

    print()
    print(
        f"1-minute load average during the run: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores "
        "(other work slows both sides; 'best' is the least disturbed round of each)"
    )
    rows = []
    for label, pick in (("median", statistics.median), ("best", min)):
        floor, wall, inner = pick(floors), pick(walls), pick(inners)
        lo, hi = (records / wall / r for r in reversed(REFERENCE_IPS))
        print(
            f"[{label} of {args.rounds}] copy floor (1 process read+write): {floor:.2f} s = {ips(floor)} "
            f"(issue: {FLOOR_ISSUE_S[0]}-{FLOOR_ISSUE_S[1]} s)"
        )
        print(
            f"[{label} of {args.rounds}] ours ({args.workers} workers, 8+2 shards, {records:,} records, "
            f"{manifest['totals']['reencoded']} re-encoded): whole process {wall:.2f} s = {ips(wall)}; "
            f"conversion alone {inner:.2f} s = {ips(inner)}"
        )
        print(
            f"[{label} of {args.rounds}] vs reference build_imagenet_data.py ({REFERENCE_IPS[0]}-{REFERENCE_IPS[1]} "
            f"images/s at 2 threads): {lo:.1f}x-{hi:.1f}x on whole-process wall time (target >= 5x); vs the copy "
            f"floor: {floor / wall:.0%} on whole-process time, {floor / inner:.0%} on conversion time "
            "(target >= 50%)"
        )
        rows.append(
            [
                f"{label} of {args.rounds}",
                *(f"{s:.2f} ({ips(s)})" for s in (floor, wall, inner)),
                f"{lo:.1f}–{hi:.1f}×",
                f"{floor / wall:.0%} / {floor / inner:.0%}",
            ]
        )
    cp, cv = statistics.median(copy_cpu), statistics.median(convert_cpu)
    print(
        f"CPU time (user+sys, median): copy floor {cp:.2f} s, ours {cv:.2f} s over all processes "
        f"({cv / cp:.1f}x the copy's work; on {args.workers} idle cores that is {cp / (cv / args.workers):.0%} "
        "of the copy's speed before start-up)"
    )
    print(f"peak RSS of any one process: {rss / 1024:.0f} MB (reference: {REFERENCE_RSS_MB} MB)")
    verified = "OK" if check.returncode == 0 else "FAILED: " + check.stderr[-500:]
    print(f"verify ({args.workers} workers, every record + sha256): {verify_s:.2f} s ({verified})")
    title = (
        f"{n:,} images ({info['train_images']:,} train + {info['validation_images']:,} validation, "
        f"{total / 1e6:.0f} MB, {len(info['png_named_jpeg'])} PNG named .JPEG + {len(info['cmyk_jpeg'])} CMYK) "
        f"-> 8 + 2 TFRecord shards, {args.workers} workers; seconds (throughput)"
    )
    record.write(
        [
            resultfile.table(
                title,
                [
                    "rounds",
                    "copy floor: 1 process read + write",
                    "ours, whole process",
                    "ours, conversion alone",
                    f"× reference ({REFERENCE_IPS[0]}–{REFERENCE_IPS[1]} images/s; target ≥ 5)",
                    "copy floor ÷ ours: whole process / conversion (target ≥ 50%)",
                ],
                rows,
            ),
            resultfile.table(
                "work and memory",
                ["figure", "value"],
                [
                    ["CPU seconds, median (user + sys)", f"copy {cp:.2f}, ours {cv:.2f} over all processes"],
                    ["peak RSS of any one process (MB)", f"{rss / 1024:.0f} (reference {REFERENCE_RSS_MB})"],
                    [f"verify ({args.workers} workers, every record + sha256)", f"{verify_s:.2f} s, {verified}"],
                ],
            ),
        ],
        notes=[
            f"1-min load average during the rounds {min(loads):.1f}–{max(loads):.1f}; the reference "
            "figures are issue 5's, measured on the earlier 2-core VM"
        ],
    )
    return 0 if check.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
