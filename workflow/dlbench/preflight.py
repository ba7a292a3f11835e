"""A `snakemake` command's study files, checked before Snakemake reads them.

Snakemake's command line loads each `--configfile` before any workflow code runs: a file that does not exist
ends in Snakemake's own traceback, and a YAML mistake (a tab in the indentation, an empty file) gets a message
that names no file. bootstrap.sh therefore puts one startup line into the core environment
(`_dlbench_preflight.pth` in .venv's site-packages, see `pth_line`): in a process that is Snakemake's command
line, and only there, it calls `check_command` as Snakemake is first imported, which ends the command with
dlbench's message naming the file (and line and column) when a study file is missing or cannot be read as a
study. The check waits for that import because a .pth line runs while site-packages are still being added: in a
.venv made with --system-site-packages, the interpreter's own site-packages (where an NGC-style image keeps
pyyaml and jsonschema) come after .venv's .pth files, and by the time anything imports Snakemake they are all
on sys.path. Everything else about a
study (keys, values) is checked by the workflow itself, with its line, before any job.
"""

from __future__ import annotations

import os
import sys

CONFIG_OPTIONS = ("--configfile", "--configfiles")
# Snakemake's own job processes (local jobs, SLURM jobs) run with study files it wrote or checked already.
JOB_OPTIONS = ("--target-jobs",)


def study_files(args: list[str]) -> list[str]:
    """The files a Snakemake command line names with --configfile/--configfiles (several values each, or
    `--configfile=FILE`)."""
    files: list[str] = []
    taking = False
    for arg in args:
        name, equals, value = arg.partition("=")
        if name in CONFIG_OPTIONS:
            taking = not equals
            if equals:
                files.append(value)
        elif taking and not arg.startswith("-"):
            files.append(arg)
        else:
            taking = False
    return files


def problems(args: list[str]) -> list[str]:
    """One line per study file of the command that is missing or is not a readable study file."""
    if any(arg.partition("=")[0] in JOB_OPTIONS for arg in args):
        return []
    files = study_files(args)
    if not files:
        return []
    from .plan.configfile import StudyFile, StudyFileError  # only when there is a file to read: Snakemake starts often

    lines = []
    for path in files:
        if not os.path.exists(path):
            lines.append(f"--configfile {path}: no such file (from {os.getcwd()})")
            continue
        try:
            StudyFile(path)
        except StudyFileError as error:
            lines.append(str(error))
    return lines


def check_command(args: list[str]) -> None:
    """Stop this Snakemake command before Snakemake reads its study files when one cannot be read."""
    lines = problems(args)
    if lines:
        sys.stderr.write("dlbench: invalid configuration:\n" + "".join(f"  {line}\n" for line in lines))
        sys.stderr.flush()
        os._exit(1)  # at interpreter start-up (a .pth line), where SystemExit would print a fatal error


def forget_dlbench() -> None:
    """Remove dlbench from sys.modules, so that the Snakefile imports its own checkout's package."""
    for name in [m for m in sys.modules if m == "dlbench" or m.startswith("dlbench.")]:
        del sys.modules[name]


class CheckOnSnakemakeImport:
    """A sys.meta_path entry that runs `check_command` once, when `snakemake` is first imported, and then leaves
    sys.meta_path; it finds no module itself (the regular finders import Snakemake)."""

    def __init__(self, workflow_dir: str, args: list[str]) -> None:
        self.workflow_dir = workflow_dir
        self.args = args

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name != "snakemake":
            return None
        sys.meta_path.remove(self)
        # dlbench was forgotten after the startup line: its modules are imported again, from this checkout.
        sys.path.insert(0, self.workflow_dir)
        try:
            check_command(self.args)
        finally:
            sys.path.remove(self.workflow_dir)
            forget_dlbench()
        return None


def check_when_snakemake_is_imported(workflow_dir: str, args: list[str]) -> None:
    """Arrange `check_command(args)` for the moment Snakemake is imported (see the module's docstring)."""
    if study_files(args) and not any(arg.partition("=")[0] in JOB_OPTIONS for arg in args):
        sys.meta_path.insert(0, CheckOnSnakemakeImport(workflow_dir, args))


def pth_line(workflow_dir: str) -> str:
    """The startup line bootstrap.sh installs: in Snakemake's command line (`snakemake …` or `python -m snakemake
    …`) it imports this module from `workflow_dir` (which imports only os and sys: site-packages may be
    incomplete yet) and arranges the check of the command's study files; elsewhere nothing."""
    # dlbench leaves sys.modules again, so that the Snakefile imports its own checkout's package.
    code = (
        "if sys.orig_argv[1:3] == ['-m', 'snakemake'] or os.path.basename(sys.argv[0]) == 'snakemake':\n"
        f"    sys.path.insert(0, {workflow_dir!r})\n"
        "    import dlbench.preflight\n"
        f"    sys.path.remove({workflow_dir!r})\n"
        f"    dlbench.preflight.check_when_snakemake_is_imported({workflow_dir!r}, sys.argv[1:])\n"
        "    dlbench.preflight.forget_dlbench()\n"
    )
    return f"import os, sys; exec({code!r})\n"


if __name__ == "__main__":  # bootstrap.sh: print the startup line for this checkout's workflow/ directory
    print(pth_line(sys.argv[1]), end="")
