"""Parse + aggregate other projects' logs (MLLOG, DLLogger) of 10,000 runs each vs 10,000 of dlbench's own logs.

    .venv/bin/python benchmarks/parse_logs.py [--runs 10000] [--builtin]

Target: each external kind within 1.5x the time of our own logs (parse + aggregate.summarise; MLPerf also
scores its sets with mlperf.score_records). Printed, not asserted. Each kind is also set against a floor
measured in the same run: json.loads of every record (MLLOG, ours), a regex over the DLL lines' pairs (DLLogger).
The logs are the shapes of the shared reference logs (../shared/reference/external-logs, read in place; their
numbers varied per run) where that folder exists, else built-in templates of the same shapes
(dlbench.logformats.external_log_fixtures). MLPerf runs come in sets of 5, as submitted. Writes
benchmarks/results/parse_logs.json (figures.py renders it into benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import resultfile  # noqa: E402
from report_pipeline import make_logs  # noqa: E402

from dlbench import logformats  # noqa: E402
from dlbench.collect.aggregate import summarise  # noqa: E402
from dlbench.collect.records import FIELDS  # noqa: E402
from dlbench.logformats import external_log_fixtures, mlperf  # noqa: E402

REFERENCE = ROOT.parent / "shared/reference/external-logs"
TOPOLOGIES = ["1x1", "1x8", "2x8", "4x8"]
_TIME = re.compile(r'"time_ms": (\d+)')
_THROUGHPUT = re.compile(
    r'((?:ips|throughput_train|sequences_per_second|train_throughput|"throughput")\s?:\s)'
    r"([0-9]+\.[0-9]+)"
)
_PAIR = re.compile(r"(\S+) : (\S+)")


def templates(tmp: Path, builtin: bool = False) -> tuple[list[str], list[str], str]:
    """MLLOG and DLLogger log texts to scale, and where they come from."""
    if REFERENCE.is_dir() and not builtin:
        mllog = [p.read_text() for p in sorted(REFERENCE.glob("mllog/*/result_*.log"))]
        dll = [p.read_text() for p in sorted(REFERENCE.glob("dllogger/*.log"))]
        return mllog, dll, "the shared reference logs' shapes"
    mllog = [
        external_log_fixtures.write_mllog(
            tmp / "t/retinanet.txt",
            benchmark="ssd",
            weights_lines=80,
            eval_accuracy=[0.2, 0.3, 0.33, 0.34, 0.345],
            epoch_throughput=[276.6, 278.7, 279.3, 281.5, 290.5],
        ).read_text(),
        external_log_fixtures.write_mllog(
            tmp / "t/resnet.txt", eval_accuracy=[0.1 * i for i in range(1, 12)]
        ).read_text(),
    ]
    shapes = {
        "pytorch_convnets": (63, 20),
        "tf_convnets": (30, 40),
        "pytorch_bert": (20, 60),
        "tf_bert": (45, 380),
        "mxnet_convnets": (75, 350),
    }
    dll = [
        external_log_fixtures.write_dllogger(
            tmp / f"t/{name}.log",
            script=name,
            values=[5000.0 + i for i in range(steps)],
            summary=5000.0,
            epochs=3 if name == "mxnet_convnets" else 1,
            banner=banner,
            prefix="[1,0]<stdout>:" if name == "mxnet_convnets" else "",
        ).read_text()
        for name, (steps, banner) in shapes.items()
    ]
    return mllog, dll, "built-in templates of the same shapes"


def vary(text: str, i: int) -> str:
    """The same lines with this run's numbers: times shifted, throughput scaled."""
    text = _TIME.sub(lambda m: f'"time_ms": {int(m.group(1)) + i * 1000}', text)
    return _THROUGHPUT.sub(lambda m: f"{m.group(1)}{float(m.group(2)) * (1 + (i % 97) / 1000):.6f}", text)


def write_external(root: Path, runs: int, mllog: list[str], dll: list[str]) -> tuple[list, list]:
    """(path, labels) of `runs` MLLOG runs and `runs` DLLogger runs, 25 runs per configuration as ours
    (report_pipeline.make_logs: 400 configurations for 10,000 runs); MLPerf's in sets of 5."""
    mllog_runs, dll_runs = [], []
    for i in range(runs):
        config = i // 25
        labels = {
            "framework": "ngc-pytorch",
            "topology": TOPOLOGIES[config % 4],
            "precision": "amp",
            "variant": f"v{config}",
        }
        path = root / f"mllog/set{i // 5}/result_{i % 5}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(vary(mllog[(i // 5) % len(mllog)], i))
        mllog_runs.append((path, labels))
    for i in range(runs):
        config, rep = divmod(i, 25)
        labels = {
            "framework": "ngc",
            "topology": TOPOLOGIES[config % 4],
            "batch_size": 16 * (1 + config % 50),
            "variant": f"v{config}",
            "repeat": rep + 1,
        }
        path = root / f"dllogger/c{config}/rep{rep + 1}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(vary(dll[config % len(dll)], i))
        dll_runs.append((path, labels))
    return mllog_runs, dll_runs


def timed(step: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = step()
    return time.perf_counter() - started, result


def floor(paths: list[Path], read_line: Callable[[str], object]) -> float:
    """Reading every line of the logs and decoding what a parser must decode, nothing more."""

    def run() -> None:
        for path in paths:
            with open(path) as f:
                for line in f:
                    read_line(line)

    return timed(run)[0]


def mllog_line(line: str) -> object:
    at = line.find(":::MLLOG ")
    return json.loads(line[at + 9 :]) if at >= 0 else None


def dll_line(line: str) -> object:
    return _PAIR.findall(line) if "DLL" in line else None


def parse_all(runs: list[tuple[Path, dict]], source: str) -> pd.DataFrame:
    records = [logformats.parse(path, source, labels) for path, labels in runs]
    if source == mlperf.NAME:
        records = mlperf.score_records(records)
    frame = pd.DataFrame(records, columns=FIELDS)
    if source != "dlbench":  # ours include OOM runs on purpose (report_pipeline's mix)
        assert (frame["status"] == "ok").all(), frame.loc[frame["status"] != "ok", "error"].iloc[0]
    return frame


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--builtin", action="store_true", help="built-in templates even where the shared logs exist")
    args = p.parse_args()
    record = resultfile.Recorder(__file__)
    mlperf.scaling_factor(ROOT)  # import result_summarizer (pandas, scipy: ~1-3 s once) outside the timings
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        mllog_templates, dll_templates, origin = templates(root, args.builtin)
        ours = [Path(p) for p in make_logs(root / "ours", args.runs)]
        mllog_runs, dll_runs = write_external(root, args.runs, mllog_templates, dll_templates)
        results = {}
        for kind, runs, source, read_line, floor_name in (
            ("ours", [(p, {}) for p in ours], "dlbench", json.loads, "json.loads"),
            ("MLLOG", mllog_runs, "mlperf", mllog_line, "json.loads"),
            ("DLLogger", dll_runs, "dllogger", dll_line, "regex over DLL pairs"),
        ):
            paths = [path for path, _ in runs]
            bottom = floor(paths, read_line)  # also brings the files into the page cache, as for every kind
            parsing, frame = timed(lambda runs=runs, source=source: parse_all(runs, source))
            aggregating, summary = timed(lambda frame=frame: summarise(frame))
            size = sum(path.stat().st_size for path in paths) / 1e6
            lines = sum(1 for path in paths for _ in open(path))
            results[kind] = (parsing, aggregating, bottom, floor_name, len(summary), lines, size)
        shutil.rmtree(root, ignore_errors=True)
    title = f"{args.runs:,} runs per kind, 25 per configuration; external logs: {origin}"
    print(title)
    base = sum(results["ours"][:2])
    rows = []
    for kind, (parsing, aggregating, bottom, floor_name, configs, lines, size) in results.items():
        total = parsing + aggregating
        print(
            f"{kind:9s} {lines:>9,} lines {size:6.1f} MB {configs:>4} configs: parse {parsing:5.1f} s + aggregate "
            f"{aggregating:4.1f} s = {total:5.1f} s, {total / base:4.2f}x ours (target <= 1.5); "
            f"floor {bottom:4.1f} s, {total / bottom:3.1f}x the floor"
        )
        rows.append(
            [
                kind,
                f"{lines:,}",
                round(size, 1),
                configs,
                round(parsing, 1),
                round(aggregating, 1),
                round(total, 1),
                round(total / base, 2),
                f"{bottom:.1f} ({floor_name})",
                round(total / bottom, 1),
            ]
        )
    record.write(
        [
            resultfile.table(
                title,
                [
                    "kind",
                    "lines",
                    "MB",
                    "configurations",
                    "parse (s)",
                    "aggregate (s)",
                    "total (s)",
                    "× ours (target <= 1.5)",
                    "floor (s)",
                    "× the floor",
                ],
                rows,
            )
        ]
    )


if __name__ == "__main__":
    main()
