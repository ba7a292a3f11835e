"""Line coverage of `workflow/dlbench` by the test suite, subprocesses included, on a fresh clone of a commit.

    .venv/bin/python benchmarks/coverage_suite.py                    # HEAD, the full suite (CI's command)
    .venv/bin/python benchmarks/coverage_suite.py --rev b4a88c6 -- -m "not slow"
    .venv/bin/python benchmarks/coverage_suite.py --compare LINES_A LINES_B --revs A B   # modules that lost lines

Every Python process the suite starts counts: pytest's workers, Snakemake, the harness in the framework
environments, SLURM's jobs. They all run on the interpreter the virtual environments were made from, so for the
length of the run a `sitecustomize.py` in that interpreter's standard library directory starts coverage in any
process that has COVERAGE_PROCESS_START set (coverage.py's own subprocess hook) and puts a directory holding only
coverage on its path (a framework environment's packages are not touched). It is removed afterwards; the script
refuses to run where a sitecustomize.py already exists. A process that exits through os._exit (a rank killed by a
test) or a test that copies the package elsewhere is not counted: the figures are a lower bound, the same way before
and after. Results: benchmarks/results/coverage_suite-<rev>[-<label>].json, a row per package (statements, covered
lines), and the covered line numbers per module in benchmarks/results/coverage-lines/<rev>[-<label>].json (for
--compare).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

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


def covered_by_module(data_file: Path, source: Path, coverage: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Covered and missing statements per module (path relative to the package) from a combined data file;
    `coverage`: the command that runs coverage.py, with `env`."""
    out = data_file.with_suffix(".json")
    subprocess.run([*coverage, "json", "--data-file", str(data_file), "-o", str(out), "--include", f"{source}/*"],
                   check=True, env=env)  # fmt: skip
    files = json.loads(out.read_text())["files"]
    return {
        str(Path(name).relative_to(source)): {"executed": data["executed_lines"], "missing": data["missing_lines"]}
        for name, data in files.items()
    }


def measure(rev: str, pytest_args: list[str], label: str) -> None:
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
        # SIGTERM ends the run through the finally below, so the interpreter is never left with the hook.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"coverage_suite: stopped by signal {signum}"))
        hook.write_text(SITECUSTOMIZE.format(lib=str(lib)))
        started = time.perf_counter()
        try:
            env = dict(os.environ, COVERAGE_PROCESS_START=str(rc), PYTHONDONTWRITEBYTECODE="1")
            done = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "-q",
                                   "-p", "no:cacheprovider", *pytest_args], cwd=clone, env=env)  # fmt: skip
        finally:
            hook.unlink()
        seconds = time.perf_counter() - started
        coverage, env = [sys.executable, "-m", "coverage"], dict(os.environ, PYTHONPATH=str(lib))
        subprocess.run([*coverage, "combine", "--quiet", "--data-file", str(data_file), str(data_file.parent)],
                       check=True, env=env)  # fmt: skip
        modules = covered_by_module(data_file, source, coverage, env)
    by_package: dict[str, list[int]] = {}
    for name, lines in modules.items():
        package = name.split("/")[0] if "/" in name else "(top level)"
        totals = by_package.setdefault(package, [0, 0])
        totals[0] += len(lines["executed"]) + len(lines["missing"])
        totals[1] += len(lines["executed"])
    rows: list[list] = [[package, *totals] for package, totals in sorted(by_package.items())]
    statements = sum(row[1] for row in rows)
    covered = sum(row[2] for row in rows)
    rows.append(["all", statements, covered])
    print(f"coverage_suite: {commit}: {covered}/{statements} lines ({covered / statements:.1%}), pytest exit "
          f"{done.returncode} in {seconds:.0f} s")  # fmt: skip
    variant = f"{commit}-{label}" if label else commit
    lines_file = resultfile.RESULTS / "coverage-lines" / f"{variant}.json"  # not a figure: figures.py reads *.json
    lines_file.parent.mkdir(exist_ok=True)
    lines_file.write_text(json.dumps({name: lines["executed"] for name, lines in sorted(modules.items())}) + "\n")
    record.write(
        [resultfile.table(f"Lines of workflow/dlbench the tests run at {commit}, by package", ["package",
                                                                                     "statements", "covered"], rows)],
        notes=[f"pytest {' '.join(pytest_args) or '(CI: the full suite)'}: exit {done.returncode} in {seconds:.0f} s "
               "(under coverage; not a CI timing)"],
        variant=variant,
    )  # fmt: skip


def compare(before: Path, after: Path, revs: tuple[str, str] | None) -> int:
    """Modules that lost covered lines from BEFORE to AFTER (the -lines.json files of two runs); exit 1 if any.
    With the two commits, a module moved between them is compared under its new path, and a module whose text
    is the same at both must cover every line it covered before; any other module, at least as many lines."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    renamed, same_source = source_changes(*revs) if revs else ({}, set())
    lost = []
    for name, lines in old.items():
        now = new.get(renamed.get(name, name), [])
        missing = sorted(set(lines) - set(now)) if name in same_source else []
        if missing or len(now) < len(lines):
            lost.append(name)
            print(f"{name}: {len(lines)} -> {len(now)} covered lines" + (f"; no longer run: {missing}" * bool(missing)))
    total_old, total_new = sum(map(len, old.values())), sum(map(len, new.values()))
    print(f"all: {total_old} -> {total_new} covered lines; {len(lost)} module(s) lost covered lines")
    return 1 if lost else 0


def source_changes(rev_a: str, rev_b: str) -> tuple[dict[str, str], set[str]]:
    """Between two commits, under workflow/dlbench: the modules moved (old path -> new, relative to the package)
    and the modules whose text is the same at both (under their old paths)."""
    status = subprocess.run(["git", "diff", "-M", "--name-status", rev_a, rev_b, "--", "workflow/dlbench"], cwd=REPO,
                            text=True, capture_output=True, check=True).stdout.splitlines()  # fmt: skip
    every = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev_a, "workflow/dlbench"], cwd=REPO, text=True,
                           capture_output=True, check=True).stdout.split()  # fmt: skip

    def short(path: str) -> str:
        return str(Path(path).relative_to("workflow/dlbench"))

    renamed, changed = {}, set()
    for line in status:
        kind, *paths = line.split("\t")
        if kind.startswith("R"):
            renamed[short(paths[0])] = short(paths[1])
        if kind != "R100":
            changed.add(paths[0])
    return renamed, {short(p) for p in every if p.endswith(".py") and p not in changed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to measure (default HEAD)")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="two -lines.json files; with --revs, line sets where a module's text did not change",
    )
    parser.add_argument("--revs", nargs=2, metavar=("REV_BEFORE", "REV_AFTER"), help="the commits of --compare")
    parser.add_argument("--label", default="", help="a name for the results files besides the commit (a subset)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: CI's full suite)")
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare, tuple(args.revs) if args.revs else None))
    measure(args.rev, args.pytest_args, args.label)


if __name__ == "__main__":
    main()
