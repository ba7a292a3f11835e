"""The frameworks the benchmark runs, one entry each (standard library only: the harness and the core
environment both import it).

An entry names the framework (the --framework value, the config's framework axis), its display name, what
"compiler on" means in it and what its step runs as with compiler off (eager, but JAX's is compiled by XLA).
By convention it then has
- its backend package harness/backends/<name>/ with the modules BACKEND_MODULES: backend.py (`Backend`, a
  subclass of backends/base.py's BackendBase), resnet.py, bert.py (with `pretraining_outputs`), data.py; and any of
  OPTIONAL_MODULES (llama.py) for the models it implements beyond those;
- its environment envs/<name>.yaml (conda, or the workflow's own virtualenv).
Derived from here: spec.FRAMEWORKS (the CLI's choices), rank.load_backend, bert_logits' module, the compiler
note of report/notes.py and the report's compiler labels (report/format.py: compiler_label). The
configuration's JSON schema (workflow/schemas/config.schema.yaml) cannot import this and lists the names again:
tests/test_frameworks.py checks that it agrees, and that every entry has its package, modules, Backend and
environment file.
"""

from __future__ import annotations

from dataclasses import dataclass

BACKEND_MODULES = ("backend", "resnet", "bert", "data")  # the modules of every framework's package
# Modules of a model a framework may implement (its Backend then lists the model in `models`; without it, that
# model's runs record `unsupported`): Llama's (harness/llama.py's shapes).
OPTIONAL_MODULES = ("llama",)
EAGER = "eager"  # a step run op by op as the framework's Python calls them (no whole-step compiler)


@dataclass(frozen=True)
class Framework:
    name: str  # --framework, the config's axis, the backend package's and the environment file's name
    display_name: str
    compiler: str  # what compiler on means
    compiler_off: str = EAGER  # what its step runs as with compiler off: the report's label of such runs
    compiler_modes: bool = False  # takes torch.compile's modes (identity.COMPILER_MODES) as compiler values

    @property
    def package(self) -> str:
        return f"dlbench.harness.backends.{self.name}"

    def module(self, name: str) -> str:
        """The import path of one of the package's modules (BACKEND_MODULES)."""
        return f"{self.package}.{name}"

    @property
    def backend_module(self) -> str:
        return self.module("backend")

    @property
    def env_file(self) -> str:
        """Its environment's file name in envs/."""
        return f"{self.name}.yaml"

    @property
    def compiler_meaning(self) -> str:
        return f"{self.display_name}: {self.compiler}"


REGISTRY: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework("pytorch", "PyTorch", "torch.compile", compiler_modes=True),
        Framework("tensorflow", "TensorFlow", "XLA (tf.function jit_compile=True)"),
        Framework("mxnet", "MXNet", "hybridize(static_alloc=True, static_shape=True)"),
        # JAX always compiles (jax.jit): off is the jitted step; on has nothing more to turn on (unsupported)
        Framework(
            "jax",
            "JAX",
            "unsupported (its off already runs the whole step compiled by XLA, jax.jit)",
            compiler_off="compiled (XLA jit)",
        ),
    )
}
NAMES = tuple(REGISTRY)
