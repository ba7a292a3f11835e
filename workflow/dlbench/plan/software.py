"""Which Python a rule's command runs dlbench with, and what a job waits for first (core environment, parse time).

A framework's runs use, in this order: a runner's own `python`, the study's interpreter (`software.python`,
probed by dlbench.plan.interpreters, its build's identity then part of the command line), the image's `python`
(`software.container`, with --sdm apptainer), or an environment: the one the workflow builds from
envs/<name>.yaml (dlbench.venvs, under `software.venv_dir`), conda's `python` with --sdm conda, or for `core`
(a runner's `env: core`, dlbench's own tools) the Python of this Snakemake. That is the framework's `default`
build; a study may name others (`software.builds.<build>.<framework>`: an environment file, an interpreter or an
image, each with environment variables), which the build axis runs side by side: a build's words (its Python, its
interpreter's identity, its variables) are in its runs' command lines only, so adding or changing a build reruns
its runs and no other. workflow/rules/common.smk makes one `Software` of the study's settings and the rules read
it through short input functions.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..harness.spec import INTERPRETER_ENV
from ..venvs import MARKER, env_prefix
from ..vocabulary.axes import DEFAULT_BUILD
from .interpreters import Interpreter, resolved_python


def build_key(framework: str, build: str = DEFAULT_BUILD) -> str:
    """How a framework's build is keyed among the probed interpreters: the framework's name for its default build,
    <framework>/<build> for the others."""
    return framework if build == DEFAULT_BUILD else f"{framework}/{build}"


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
    # software.builds: build -> framework -> {env | python | container, variables}; the default build is the above
    builds: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def build(self, framework: str, build: str = DEFAULT_BUILD) -> dict[str, Any]:
        """A framework's build as the study gives it ({} for the default build)."""
        return {} if build == DEFAULT_BUILD else self.builds[build][framework]

    def env_spec(self, name: str) -> Path:
        """An environment's file: a build's (named by its file's name; from the working directory, absolute, as
        conda's `conda:` would read a relative one from the rules' directory), else envs/<name>.yaml."""
        for entry in (e for per_framework in self.builds.values() for e in per_framework.values()):
            if "env" in entry and Path(entry["env"]).stem == name:
                return Path(entry["env"]).absolute()
        return Path(self.envs_dir, f"{name}.yaml")

    def env_marker(self, framework: str) -> str:
        """The offline environment of a framework: input of every rule that runs its code."""
        return str(Path(env_prefix(self.venv_dir, self.env_spec(framework)), MARKER))

    def run_env(self, framework: str, build: str = DEFAULT_BUILD) -> str:
        """The environment a framework's runs use: envs/<framework>.yaml, a build's environment file (named by the
        file's name), or a runner's `env` (core: dlbench's own)."""
        if "env" in self.build(framework, build):
            return Path(self.build(framework, build)["env"]).stem
        return self.runners[framework]["env"] if framework in self.runners else framework

    def brings_own_python(self, framework: str, build: str = DEFAULT_BUILD) -> bool:
        """The framework's (or runner's) runs use an interpreter or image the study names, not a built environment."""
        if build != DEFAULT_BUILD:
            entry = self.build(framework, build)
            return (
                "python" in entry or "container" in entry or ("env" not in entry and self.brings_own_python(framework))
            )
        return (
            framework in self.site_python or framework in self.containers or "python" in self.runners.get(framework, {})
        )

    def uses_images(self) -> bool:
        """Whether any framework's build runs in an image (software.container, or a build's `container`)."""
        builds = (entry for per_framework in self.builds.values() for entry in per_framework.values())
        return bool(self.containers) or any("container" in entry for entry in builds)

    def container(self, framework: str, build: str = DEFAULT_BUILD) -> str | None:
        """The image a framework's build runs in (software.container, or the build's), or None."""
        entry = self.build(framework, build)
        if "container" in entry:
            return entry["container"]
        return self.containers.get(framework) if not {"env", "python"} & set(entry) else None

    def framework_python(self, framework: str, build: str = DEFAULT_BUILD) -> str:
        """The Python of a framework's (or a runner's) environment: the study's interpreter, the image's `python`,
        the workflow-built environment's, or conda's `python` with --sdm conda. A build that names only variables
        runs with the default build's."""
        entry = self.build(framework, build)
        key = build_key(framework, build)
        if "python" in entry:
            return self.interpreters[key].python if key in self.interpreters else entry["python"]
        if "container" in entry:
            return "python"
        if "env" not in entry:
            return self._default_python(framework)
        return self._env_python(self.run_env(framework, build))

    def _default_python(self, framework: str) -> str:
        if framework in self.runners and "python" in self.runners[framework]:
            return resolved_python(self.runners[framework]["python"])
        if framework in self.interpreters:
            return self.interpreters[framework].python
        if framework in self.site_python:
            return self.site_python[framework]
        if framework in self.containers:
            return "python"
        return self._env_python(self.run_env(framework))

    def _env_python(self, env: str) -> str:
        if env == "core":
            return self.core_python
        return "python" if self.use_conda else str(Path(env_prefix(self.venv_dir, self.env_spec(env)), "bin", "python"))

    def run_env_input(self, framework: str, build: str = DEFAULT_BUILD) -> list[str] | str:
        """A run waits for its offline environment to be built (nothing to wait for with conda, core or a python)."""
        env = self.run_env(framework, build)
        if self.use_conda or env == "core" or self.brings_own_python(framework, build):
            return []
        return self.env_marker(env)

    def study_env_markers(self, frameworks: list[str]) -> list[str]:
        """The offline environments the study's runs use (their package lists go into the report)."""
        if self.use_conda:
            return []
        envs = {self.run_env(fw) for fw in frameworks if not self.brings_own_python(fw)} - {"core"}
        return [self.env_marker(env) for env in sorted(envs)]

    def run_conda_env(self, framework: str, build: str = DEFAULT_BUILD) -> str | None:
        """With --sdm conda: envs/<framework>.yaml (or the build's environment file), unless the study brings the
        framework's interpreter or image."""
        if self.brings_own_python(framework, build):
            return None
        return str(self.env_spec(self.run_env(framework, build)))

    def run_module(self, env: str, module: str, build: str = DEFAULT_BUILD) -> str:
        """Shell words that run a dlbench module in an environment: "core" (this Snakemake's Python), a framework
        or "dataprep" (envs/<name>.yaml: the offline venv, or conda's `python` with --sdm conda; the study's own
        interpreter, whose build's identity (dlbench.plan.interpreters) is in the words, so that a changed build
        reruns), in a framework's build (its Python, its interpreter's identity and its variables)."""
        variables = dict(self.build(env, build).get("variables") or {})
        # dlbench's package first, then the build's own PYTHONPATH (a site module's packages): both take effect
        extra = [_text(variables.pop("PYTHONPATH"))] if "PYTHONPATH" in variables else []
        path = ":".join([self.package_dir, *extra])
        words = f"PYTHONPATH={shlex.quote(path)} {shlex.quote(self.framework_python(env, build))} -m {module}"
        key = build_key(env, build) if "python" in self.build(env, build) else env
        if key in self.interpreters:
            words = f"{INTERPRETER_ENV}={shlex.quote(self.interpreters[key].identity)} {words}"
        assignments = [f"{name}={shlex.quote(_text(value))}" for name, value in sorted(variables.items())]
        return " ".join([*assignments, words])


def _text(value: object) -> str:
    """A variable's value as the shell gets it (YAML's true: 1, as a site's module sets flags)."""
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


class ShellWord:
    """A path a rule's shell command takes as one word: formatted shell-quoted, so that spaces, quotes, `;` or
    `$(...)` in it are never run. A shell template is left as it is, for Snakemake reruns a rule whose command
    text changes; like a Path, Snakemake does not record this as a parameter."""

    def __init__(self, value: object) -> None:
        self.value = str(value)

    def __str__(self) -> str:
        return shlex.quote(self.value)
