"""Which Python a rule's command runs dlbench with, and what a job waits for first (core environment, parse time).

A framework's runs use, in this order: a runner's own `python`, the study's interpreter (`software.python`,
probed by dlbench.plan.interpreters, its build's identity then part of the command line), the image's `python`
(`software.container`, with --sdm apptainer), or an environment: the one the workflow builds from
envs/<name>.yaml (dlbench.venvs, under `software.venv_dir`), conda's `python` with --sdm conda, or for `core`
(a runner's `env: core`, dlbench's own tools) the Python of this Snakemake. workflow/rules/common.smk makes one
`Software` of the study's settings and the rules read it through short input functions.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..harness.spec import INTERPRETER_ENV
from ..venvs import MARKER, env_prefix
from .interpreters import Interpreter


@dataclass(frozen=True)
class Software:
    package_dir: str  # workflow/: the dlbench package's parent, the jobs' PYTHONPATH
    envs_dir: Path  # envs/<name>.yaml
    venv_dir: Path  # software.venv_dir: where the workflow builds them
    core_python: str  # this Snakemake's Python (the core environment)
    use_conda: bool  # --sdm conda: Snakemake activates envs/<name>.yaml itself
    site_python: dict[str, str]  # software.python: framework -> interpreter
    containers: dict[str, str]  # software.container: framework -> image
    runners: dict[str, dict[str, Any]]  # the study's runners by name (`env`, `python`, ...)
    interpreters: dict[str, Interpreter]  # software.python as probed by the Snakemake that plans (none in a job)

    def env_spec(self, framework: str) -> Path:
        return Path(self.envs_dir, f"{framework}.yaml")

    def env_marker(self, framework: str) -> str:
        """The offline environment of a framework: input of every rule that runs its code."""
        return str(Path(env_prefix(self.venv_dir, self.env_spec(framework)), MARKER))

    def run_env(self, framework: str) -> str:
        """The environment a framework's runs use: envs/<framework>.yaml, or a runner's `env` (core: dlbench's own)."""
        return self.runners[framework]["env"] if framework in self.runners else framework

    def brings_own_python(self, framework: str) -> bool:
        """The framework's (or runner's) runs use an interpreter or image the study names, not a built environment."""
        return (
            framework in self.site_python or framework in self.containers or "python" in self.runners.get(framework, {})
        )

    def framework_python(self, framework: str) -> str:
        """The Python of a framework's (or a runner's) environment: the study's interpreter, the image's `python`,
        the workflow-built environment's, or conda's `python` with --sdm conda."""
        if framework in self.runners and "python" in self.runners[framework]:
            return self.runners[framework]["python"]
        if framework in self.interpreters:
            return self.interpreters[framework].python
        if framework in self.site_python:
            return self.site_python[framework]
        if framework in self.containers:
            return "python"
        env = self.run_env(framework)
        if env == "core":
            return self.core_python
        return "python" if self.use_conda else str(Path(env_prefix(self.venv_dir, self.env_spec(env)), "bin", "python"))

    def run_env_input(self, framework: str) -> list[str] | str:
        """A run waits for its offline environment to be built (nothing to wait for with conda, core or a python)."""
        env = self.run_env(framework)
        if self.use_conda or env == "core" or self.brings_own_python(framework):
            return []
        return self.env_marker(env)

    def study_env_markers(self, frameworks: list[str]) -> list[str]:
        """The offline environments the study's runs use (their package lists go into the report)."""
        if self.use_conda:
            return []
        envs = {self.run_env(fw) for fw in frameworks if not self.brings_own_python(fw)} - {"core"}
        return [self.env_marker(env) for env in sorted(envs)]

    def run_conda_env(self, framework: str) -> str | None:
        """With --sdm conda: envs/<framework>.yaml, unless the study brings the framework's interpreter or image."""
        return None if self.brings_own_python(framework) else str(self.env_spec(self.run_env(framework)))

    def run_module(self, env: str, module: str) -> str:
        """Shell words that run a dlbench module in an environment: "core" (this Snakemake's Python), a framework
        or "dataprep" (envs/<name>.yaml: the offline venv, or conda's `python` with --sdm conda; the study's own
        interpreter, whose build's identity (dlbench.plan.interpreters) is in the words, so that a changed build
        reruns)."""
        words = f"PYTHONPATH={shlex.quote(self.package_dir)} {shlex.quote(self.framework_python(env))} -m {module}"
        if env in self.interpreters:
            words = f"{INTERPRETER_ENV}={shlex.quote(self.interpreters[env].identity)} {words}"
        return words


class ShellWord:
    """A path a rule's shell command takes as one word: formatted shell-quoted, so that spaces, quotes, `;` or
    `$(...)` in it are never run. A shell template is left as it is, for Snakemake reruns a rule whose command
    text changes; like a Path, Snakemake does not record this as a parameter."""

    def __init__(self, value: object) -> None:
        self.value = str(value)

    def __str__(self) -> str:
        return shlex.quote(self.value)
