"""The frameworks the benchmark runs: one declaration each, the one home of a framework's facts (standard library
only: the harness in every framework environment and the core environment's stages all import it).

A declaration names the framework (the --framework value, the config's framework axis, its backend package's and
environment file's name), its words for a reader, the Python distribution its environment pins and the modules
its backend imports, what `compiler: off/on` and `precision: amp` run as, its collectives and how a rank's threads
are set. Its code is its backend package harness/backends/<name>/ with the modules BACKEND_MODULES: backend.py
(`Backend`, a subclass of backends/base.py's BackendBase, which also holds the framework's GEMM for a CPU peak,
`cpu_gemm`, set up as its runs are), resnet.py, bert.py (with `pretraining_outputs`), data.py; and any of
OPTIONAL_MODULES (llama.py) for the models it implements beyond those. Its environment is envs/<name>.yaml (conda,
or the workflow's own virtualenv).

Derived from here: spec.FRAMEWORKS (the CLI's choices), rank.load_backend, probe.py, peak.py's libraries, bert_logits'
module, the config schema's framework words (`with_framework_words`, applied wherever the schema is loaded), the
study's refusal of a framework that is not offered (UNAVAILABLE), the compiler note of report/notes.py and the
report's compiler labels (report/format.py: compiler_label). Checked against it (they cannot import it):
pyproject.toml's mypy list of untyped framework modules and tests/test_architecture.py's import rules
(tests/test_frameworks.py), and the contract suite's CASES (tests/test_contract_framework.py: one per entry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BACKEND_MODULES = ("backend", "resnet", "bert", "data")  # the modules of every framework's package
# Modules of a model a framework may implement (its Backend then lists the model in `models`; without it, that
# model's runs record `unsupported`): Llama's (harness/llama.py's shapes).
OPTIONAL_MODULES = ("llama",)
EAGER = "eager"  # a step run op by op as the framework's Python calls them (no whole-step compiler)


@dataclass(frozen=True)
class Framework:
    name: str  # --framework, the config's axis, the backend package's and the environment file's name
    display_name: str
    package: str  # the distribution envs/<name>.yaml pins (its version is what a run reads back and records)
    imports: tuple[str, ...]  # the top-level modules its backend imports (and only its backend may)
    compiler: str  # what compiler on means
    amp: str  # what precision amp runs as, on a GPU and on a CPU
    collectives: str  # how several ranks exchange gradients by default (strategy auto; strategies.py: the others)
    threads: str  # how a rank's thread count is set, and read back into the run's settings
    compiler_off: str = EAGER  # what its step runs as with compiler off: the report's label of such runs
    compiler_modes: bool = False  # takes torch.compile's modes (identity.COMPILER_MODES) as compiler values

    @property
    def package_path(self) -> str:
        return f"dlbench.harness.backends.{self.name}"

    def module(self, name: str) -> str:
        """The import path of one of the package's modules (BACKEND_MODULES)."""
        return f"{self.package_path}.{name}"

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
        Framework(
            "pytorch",
            "PyTorch",
            package="torch",
            imports=("torch",),
            compiler="torch.compile",
            amp="torch.autocast: bf16 on a CPU, fp16 with a GradScaler or bf16 on a GPU",
            collectives="DistributedDataParallel over Gloo on CPUs, NCCL on GPUs",
            threads="torch.set_num_threads per rank",
            compiler_modes=True,
        ),
        Framework(
            "tensorflow",
            "TensorFlow",
            package="tensorflow",
            imports=("tensorflow",),
            compiler="XLA (tf.function jit_compile=True)",
            amp="Keras mixed_bfloat16 on a CPU, mixed_float16 with loss scaling or mixed_bfloat16 on a GPU",
            collectives="MultiWorkerMirroredStrategy: ring (gRPC) on CPUs, NCCL on GPUs",
            threads="tf.config.threading intra-op threads per rank",
        ),
        Framework(
            "mxnet",
            "MXNet",
            package="mxnet",
            imports=("mxnet",),
            compiler="hybridize(static_alloc=True, static_shape=True)",
            amp="mxnet.contrib.amp: bf16 on a CPU with AVX-512, fp16 on a GPU",
            collectives="the dist_sync kvstore (ps-lite: a scheduler and a server per node)",
            threads="OMP_NUM_THREADS before MXNet loads",
        ),
        # JAX always compiles (jax.jit): off is the jitted step; on has nothing more to turn on (unsupported)
        Framework(
            "jax",
            "JAX",
            package="jax",
            imports=("jax", "flax", "optax"),
            compiler="unsupported (its off already runs the whole step compiled by XLA, jax.jit)",
            amp="bf16 compute with float32 parameters (Flax dtype), on a CPU and a GPU",
            collectives="jax.distributed with shard_map and lax.pmean: Gloo on CPUs, NCCL on GPUs",
            threads="XLA's CPU client on the rank's cores (its affinity)",
            compiler_off="compiled (XLA jit)",
        ),
        Framework(
            "paddle",
            "PaddlePaddle",
            package="paddlepaddle",
            imports=("paddle",),
            compiler="paddle.jit.to_static (the step as a static graph)",
            amp="paddle.amp.auto_cast on a GPU: fp16 with dynamic loss scaling (GradScaler) or bf16; a CPU has no "
            "bf16 kernels (unsupported)",
            collectives="paddle.DataParallel in collective mode: Gloo on CPUs, NCCL on GPUs (the PADDLE_* variables)",
            threads="paddle's own thread setting per rank (it forces one OpenMP thread at import when none is set)",
        ),
    )
}
NAMES = tuple(REGISTRY)

# Frameworks a DLPerf user may ask for that dlbench does not implement, with why and how to measure them anyway: a
# study naming one (and no runner of that name) is refused before any job with this.
UNAVAILABLE: dict[str, str] = {
    "oneflow": (
        "OneFlow is not one of dlbench's frameworks: PyPI's last OneFlow (0.9.0, 2023) has wheels for CPython "
        "3.7-3.10 only and CUDA builds of about 1 GB, and the project has been almost idle since 2025. To measure "
        "it anyway, run DLPerf's own OneFlow scripts as a runner of the study (runners.oneflow: their command, "
        "`python:` a site's OneFlow interpreter, `format: dlperf`, the logs they write; docs/external-logs.md)"
    ),
}


def framework_words() -> str:
    """The registered frameworks as the config schema lists them: 'pytorch (PyTorch), ...'."""
    return ", ".join(f"{f.name} ({f.display_name})" for f in REGISTRY.values())


def compiler_words() -> str:
    """What compiler on means in each registered framework: 'PyTorch: torch.compile; ...'."""
    return "; ".join(f.compiler_meaning for f in REGISTRY.values())


# Where the config schema's descriptions list the frameworks, and what compiler on means in each
WORDS: dict[str, Callable[[], str]] = {"{frameworks}": framework_words, "{compilers}": compiler_words}


def with_framework_words(schema: Any) -> Any:
    """The config schema with WORDS in its descriptions replaced by the registered frameworks' (in place)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str):
                for placeholder, words in WORDS.items():
                    value = value.replace(placeholder, words())
                schema[key] = value
            else:
                with_framework_words(value)
    elif isinstance(schema, list):
        for item in schema:
            with_framework_words(item)
    return schema
