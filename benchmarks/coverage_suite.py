"""Line coverage of `workflow/dlbench` by the test suite, subprocesses included, on a fresh clone of a commit.

    .venv/bin/python benchmarks/coverage_suite.py                    # HEAD, the full suite (CI's command)
    .venv/bin/python benchmarks/coverage_suite.py --rev b4a88c6 -- -m "not slow"
    .venv/bin/python benchmarks/coverage_suite.py --compare A.json B.json   # modules that lost covered lines

Every Python process the suite starts counts: pytest's workers, Snakemake, the harness in the framework
environments, SLURM's jobs. They all run on the interpreter the virtual environments were made from, so for the
length of the run a `sitecustomize.py` in that interpreter's standard library directory starts coverage in any
process that has COVERAGE_PROCESS_START set (coverage.py's own subprocess hook) and puts a directory holding only
coverage on its path (a framework environment's packages are not touched). It is removed afterwards; the script
refuses to run where a sitecustomize.py already exists. A process that exits through os._exit (a rank killed by a
test) or a test that copies the package elsewhere is not counted: the figures are a lower bound, the same way before
and after. Results: benchmarks/results/coverage_suite-<rev>.json, a row per module (statements, covered lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import resultfile

REPO = Path(__file__).resolve().parents[1]
SITECUSTOMIZE = """\
# Written by dlbench's benchmarks/coverage_suite.py for the length of one coverage run; removed afterwards.
import os, sys
if os.environ.get("COVERAGE_PROCESS_START"):
    sys.path.append({lib!r})
    import coverage
    coverage.process_startup()
"""


def covered_by_module(data_file: Path, source: Path, python: Path) -> dict[str, list[int]]:
    """Covered statements per module (path relative to the package) from a combined data file."""
    out = data_file.with_suffix(".json")
    subprocess.run(
        [str(python), "-m", "coverage", "json", "--data-file", str(data_file), "-o", str(out), "--include",
         f"{source}/*"],
        check=True,
    )  # fmt: skip
    files = json.loads(out.read_text())["files"]
    return {
        str(Path(name).relative_to(source)): {"executed": data["executed_lines"], "missing": data["missing_lines"]}
        for name, data in files.items()
    }


def measure(rev: str, pytest_args: list[str]) -> None:
    record = resultfile.Recorder(__file__)
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "installed_base": sys.base_prefix})["stdlib"])
    hook = stdlib / "sitecustomize.py"
    if hook.exists():
        sys.exit(f"coverage_suite: {hook} exists already; refusing to replace it")
    with tempfile.TemporaryDirectory(prefix="dlbench-coverage-") as tmp:
        work = Path(tmp)
        clone = work / "clone"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "checkout", "--quiet", rev], cwd=clone, check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, text=True,
                                capture_output=True, check=True).stdout.strip()  # fmt: skip
        if (REPO / ".venvs").is_dir():
            (clone / ".venvs").symlink_to(REPO / ".venvs")
        subprocess.run(["bash", "workflow/scripts/bootstrap.sh", "--test"], cwd=clone, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        lib = work / "coverage-lib"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(lib), "coverage"],
                       check=True)  # fmt: skip
        source = clone / "workflow" / "dlbench"
        data_file = work / "data" / ".coverage"
        data_file.parent.mkdir()
        rc = work / "coveragerc"
        rc.write_text(f"[run]\nparallel = True\nsource = {source}\ndata_file = {data_file}\n")
        hook.write_text(SITECUSTOMIZE.format(lib=str(lib)))
        started = time.perf_counter()
        try:
            env = dict(os.environ, COVERAGE_PROCESS_START=str(rc), PYTHONDONTWRITEBYTECODE="1")
            done = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "-q",
                                   "-p", "no:cacheprovider", *pytest_args], cwd=clone, env=env)  # fmt: skip
        finally:
            hook.unlink()
        seconds = time.perf_counter() - started
        python = Path(sys.executable)
        env = dict(os.environ, PYTHONPATH=str(lib))
        subprocess.run([str(python), "-m", "coverage", "combine", "--quiet", "--data-file", str(data_file),
                        str(data_file.parent)], check=True, env=env)  # fmt: skip
        os.environ["PYTHONPATH"] = str(lib)
        modules = covered_by_module(data_file, source, python)
    rows = [
        [name, len(lines["executed"]) + len(lines["missing"]), len(lines["executed"])]
        for name, lines in sorted(modules.items())
    ]
    statements = sum(row[1] for row in rows)
    covered = sum(row[2] for row in rows)
    rows.append(["all", statements, covered])
    print(f"coverage_suite: {commit}: {covered}/{statements} lines ({covered / statements:.1%}), pytest exit "
          f"{done.returncode} in {seconds:.0f} s")  # fmt: skip
    record.write(
        [resultfile.table(f"Lines of workflow/dlbench the suite runs at {commit}", ["module", "statements",
                                                                                     "covered"], rows)],
        notes=[f"pytest {' '.join(pytest_args) or '(CI: the full suite)'}: exit {done.returncode} in {seconds:.0f} s "
               "(under coverage; not a CI timing)"],
        variant=commit,
    )  # fmt: skip


def compare(before: Path, after: Path) -> int:
    """Modules whose covered-line count fell from BEFORE to AFTER (results files of this script); exit 1 if any."""

    def counts(path: Path) -> dict[str, int]:
        table = json.loads(path.read_text())["tables"][0]
        return {row[0]: row[2] for row in table["rows"]}

    old, new = counts(before), counts(after)
    lost = [(name, old[name], new.get(name, 0)) for name in old if new.get(name, 0) < old[name] and name != "all"]
    for name, was, now in lost:
        print(f"{name}: {was} -> {now} covered lines")
    print(f"all: {old.get('all')} -> {new.get('all')} covered lines; {len(lost)} module(s) lost covered lines")
    return 1 if lost else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to measure (default HEAD)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: CI's full suite)")
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    measure(args.rev, args.pytest_args)


if __name__ == "__main__":
    main()
