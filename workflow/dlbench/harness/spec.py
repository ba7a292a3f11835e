"""One run's configuration: the RunSpec and the harness command line (standard library only)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..vocabulary.axes import BUILD_NAME, BY_NAME, DEFAULT_BUILD, OPTIONS, Axis, default_max_predictions
from ..vocabulary.identity import (
    BERT_MODELS,
    COMPILER_MODES,
    LLAMA_MODELS,
    IdentityError,
    is_bert,
    is_llama,
    model_kind,
    parse_topology,
    run_id,
)
from . import quality
from .frameworks import NAMES
from .resnet import MODELS as RESNETS
from .strategies import NAME

FRAMEWORKS = NAMES  # registered in frameworks.py: a backend package each, backends/<name>/
MODELS = (*RESNETS, *BERT_MODELS, *LLAMA_MODELS)
PRECISIONS = ("fp32", "amp")
DATA = ("synthetic", "real")  # real: prepared shards under --data-dir (workflow/rules/data.smk)

# Status of a finished run. Everything but "ok" is a failure that still makes a record.
STATUSES = ("ok", "oom", "unsupported", "error", "timeout", "failed")

# The core environment's python, for the telemetry sampler (psutil, nvidia-ml-py): set by the workflow.
TELEMETRY_PYTHON_ENV = "DLBENCH_TELEMETRY_PYTHON"
# The build a study's own interpreter reported before the run (dlbench.plan.interpreters): the run records it.
INTERPRETER_ENV = "DLBENCH_INTERPRETER"
# What the supervisor sets for each rank itself (harness/__main__: the threads of the cores it gives the rank, the
# rendezvous, DLBENCH_*), after anything a build's `variables` set: a build cannot change them (dlbench.plan.study
# refuses them); PYTHONPATH a build extends (dlbench.plan.software).
RANK_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT")
RANK_VARIABLE_PREFIX = "DLBENCH_"


class Unsupported(Exception):
    """This combination cannot run here (the record says why; the study goes on)."""


@dataclass(frozen=True)
class RunSpec:
    framework: str
    model: str
    nodes: int
    devices_per_node: int
    batch_size: int  # per device
    precision: str
    compiler: bool
    data: str
    warmup_steps: int | str  # a number, or "auto": until the step times settle (rank.warmed_up)
    measured_steps: int
    repeat: int
    config_id: str
    log: str
    # The model axes given as options (axes.OPTIONS, --<name>), by name; read as attributes (spec.seq_length),
    # at the axis's default where not given. A setting of another model kind given is unsupported (BackendBase);
    # an input shape of another kind (--image-size for BERT) is ignored.
    inputs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    device: str = "auto"  # auto | cpu | cuda
    cpus: int = 0  # cores of this node given to the run; 0 = all usable
    timeout_s: float = 0.0  # 0 = none
    seed: int = 0
    max_warmup_steps: int = 200  # warmup_steps auto: the most warm-up steps
    max_predictions: int = 0  # BERT: masked positions per sequence; 0 = 20 at 128, 80 at 512 (bert.py)
    strategy: str = "auto"  # gradient exchange between ranks (strategies.py); auto: the framework's default
    build: str = DEFAULT_BUILD  # the software build the run uses (the study's software.builds), recorded
    data_dir: str = ""  # data real: ImageNet shards (train-*, dali_index/) or BERT shards (tfrecord/, hdf5/)
    launcher: str = "auto"  # auto | local | srun
    attempt: int = 1  # this try of the run (Snakemake's attempt), 1-based
    max_attempts: int = 1  # tries Snakemake makes in all (retries + 1)
    telemetry_ms: int = 0  # sampling interval of dlbench.telemetry.sampler; 0 = no sampler
    quality: str = ""  # time to quality: the settings as JSON (harness/quality.py); "" = throughput
    runner: str = ""  # an external benchmark command to run instead of our ranks (JSON; harness/runner.py)
    memory_limit_gb: float = 0.0  # CPU: address space each rank may add once its framework is loaded; 0 = none
    compiler_mode: str = ""  # compiler on: a torch.compile mode (identity.COMPILER_MODES); "" = the default mode
    emulated_bf16: str = "run"  # AMP on a CPU without native bf16: run it emulated, or skip (an unsupported record)

    @classmethod
    def of(cls, **values: Any) -> RunSpec:
        """A spec from keyword values, the model axes among them (None: not given)."""
        inputs = {a.name: values.pop(a.name) for a in OPTIONS if a.name in values}
        return cls(**values, inputs={k: v for k, v in inputs.items() if v is not None})

    def __getattr__(self, name: str) -> Any:
        """A model axis's value (only reached for names that are not fields)."""
        axis = BY_NAME.get(name)
        if axis is None or not axis.option or name.startswith("__"):
            raise AttributeError(name)
        return self.__dict__.get("inputs", {}).get(name, axis.default)

    @property
    def kind(self) -> str:
        return model_kind(self.model)

    def foreign_inputs(self) -> list[Axis]:
        """The settings given that do not apply to this model's kind (input shapes of other kinds are ignored)."""
        given = [BY_NAME[name] for name in self.inputs]
        return [axis for axis in given if not axis.applies_to(self.kind) and not axis.shape]

    def as_dict(self) -> dict[str, Any]:
        """Every setting by name (the run log header's config): the model axes of this model's kind at their
        values, those of other kinds None."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "inputs"}
        return values | {a.name: getattr(self, a.name) if a.applies_to(self.kind) else None for a in OPTIONS}

    @property
    def topology(self) -> str:
        return f"{self.nodes}x{self.devices_per_node}"

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def predictions(self) -> int:
        """BERT: masked positions per sequence, max_predictions or its default for seq_length."""
        return self.max_predictions or default_max_predictions(self.seq_length)

    @property
    def optimizer_name(self) -> str:
        """The optimizer a model trains with: BERT's optimizer axis, sgd for ResNet-50, adamw for Llama."""
        return str(self.optimizer) if is_bert(self.model) else "adamw" if is_llama(self.model) else "sgd"

    @property
    def run_id(self) -> str:
        return run_id(self.config_id, self.repeat)

    def to_args(self) -> list[str]:
        """Command-line arguments that rebuild this spec (used to start the ranks)."""
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("nodes", "devices_per_node")}
        del options["inputs"]
        return command_line(options | dict(self.inputs) | {"topology": self.topology})


def command_line(options: Mapping[str, object]) -> list[str]:
    """The harness's command line for these options, in their order: the one spelling of every option, for the
    ranks (RunSpec.to_args) and for the workflow's runs and batch-size searches (dlbench.plan.plan).
    A field name is its option with `-` for `_`; a boolean is on|off; a float is written shortest where that
    loses nothing (600.0: 600), so the same setting always gives the same words."""
    words = []
    for key, value in options.items():
        words += [f"--{key.replace('_', '-')}", _word(value)]
    return words


def _word(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and float(f"{value:g}") == value:
        return f"{value:g}"
    return str(value)


def _topology(text: str) -> tuple[int, int]:
    try:
        return parse_topology(text)
    except IdentityError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _axis_option(axis: Axis) -> dict[str, Any]:
    """argparse's type and choices for a model axis's option, from the schema of its values."""
    values = axis.values or {}
    kind = values.get("type")
    parse = _on_off if kind == "boolean" else _positive if kind == "integer" else str
    return {"type": parse, "choices": values.get("enum")}


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text == "on"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _warmup_steps(text: str) -> int | str:
    if text == "auto":
        return text
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of steps >= 0 or auto, got {text!r}")
    return int(text)


def _strategy_name(text: str) -> str:
    if not NAME.match(text):
        raise argparse.ArgumentTypeError(f"expected a strategy name (lower-case letters, digits, '_'), got {text!r}")
    return text


def _build_name(text: str) -> str:
    if not re.fullmatch(BUILD_NAME, text):
        raise argparse.ArgumentTypeError(f"expected a build name (lower-case letters, digits, '_', '.'), got {text!r}")
    return text


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run one training-throughput benchmark.")
    p.add_argument("--framework", required=True, help=f"{', '.join(FRAMEWORKS)}, or a runner's name (--runner)")
    p.add_argument("--model", choices=MODELS, required=True)
    p.add_argument("--topology", type=_topology, required=True, help="<nodes>x<devices per node>")
    p.add_argument("--batch-size", type=_positive, required=True, help="per device")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--compiler", type=_on_off, default=False, help="on|off (torch.compile, XLA, ...)")
    p.add_argument(
        "--compiler-mode",
        default="",
        choices=("", *COMPILER_MODES),
        help="with --compiler on: a torch.compile mode (PyTorch; other frameworks: unsupported)",
    )
    p.add_argument("--data", choices=DATA, default="synthetic")
    p.add_argument("--data-dir", default="", help="data real: the prepared dataset's directory")
    p.add_argument(
        "--warmup-steps",
        type=_warmup_steps,
        default=20,
        help="steps before timing, or auto: until the step times settle (at most --max-warmup-steps)",
    )
    p.add_argument("--max-warmup-steps", type=_positive, default=200, help="with --warmup-steps auto")
    p.add_argument("--measured-steps", type=_positive, default=100)
    p.add_argument("--repeat", type=_positive, default=1)
    p.add_argument("--config-id", default="adhoc")
    p.add_argument("--log", required=True, help="JSON-lines log to write")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--cpus", type=int, default=0, help="cores of this node for the run (0: all usable)")
    p.add_argument("--timeout-s", type=float, default=0.0, help="time limit of the run (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-predictions",
        type=int,
        default=0,
        help="BERT: masked positions per sequence (0: 20 at 128, 80 at 512, else ceil(0.15 x length))",
    )
    for axis in OPTIONS:  # the model axes: dlbench.vocabulary.axes declares them, their values and defaults
        p.add_argument(
            f"--{axis.name.replace('_', '-')}",
            **_axis_option(axis),
            default=None,
            help=f"{axis.description} (default {_word(axis.default)})",
        )
    p.add_argument(
        "--strategy",
        default="auto",
        type=_strategy_name,
        help="gradient exchange between ranks: auto (the framework's default) or one of the framework's "
        "strategies (dlbench/harness/strategies.py), e.g. ddp_fp16, mwms_ring, dist_sync_ps",
    )
    p.add_argument(
        "--build",
        default=DEFAULT_BUILD,
        type=_build_name,
        help="the software build this run uses, as the study names it (recorded; the build is the interpreter "
        "and environment the run was started with)",
    )
    p.add_argument(
        "--launcher",
        choices=("auto", "local", "srun"),
        default="auto",
        help="start ranks as local processes or with srun (auto: srun inside a SLURM job, world > 1)",
    )
    p.add_argument(
        "--telemetry-ms",
        type=int,
        default=0,
        help="sample utilisation, clocks, power and energy every this many ms (0: off); the sampler "
        "runs with $DLBENCH_TELEMETRY_PYTHON (the core environment's python)",
    )
    p.add_argument("--attempt", type=_positive, default=1, help="this try of the run (1-based)")
    p.add_argument(
        "--runner",
        default="",
        help="an external benchmark command (JSON definition, see "
        "dlbench/harness/runner.py) run instead of the framework's ranks",
    )
    p.add_argument(
        "--quality",
        default="",
        help="time to quality instead of throughput: the settings as a JSON "
        "object (target, eval_every_steps, learning-rate schedule, budget; see dlbench/harness/quality.py)",
    )
    p.add_argument(
        "--memory-limit-gb",
        type=float,
        default=0.0,
        help="CPU: the memory budget of each rank, GiB of address space it may add once its framework "
        "is loaded (RLIMIT_AS; 0: no limit); an allocation beyond it fails as out of memory",
    )
    p.add_argument(
        "--emulated-bf16",
        choices=("run", "skip"),
        default="run",
        help="AMP on a CPU without native bfloat16 instructions: run it emulated, or skip it (recorded unsupported)",
    )
    p.add_argument(
        "--max-attempts",
        type=_positive,
        default=1,
        help="tries in all; the last one after failed tries only writes the failure record",
    )
    return p


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    values = vars(args).copy()
    if not values["runner"] and values["framework"] not in FRAMEWORKS:
        raise SystemExit(f"--framework {values['framework']!r}: choose from {', '.join(FRAMEWORKS)} (or give --runner)")
    try:
        quality.parse(values["quality"])
    except (ValueError, TypeError) as error:
        raise SystemExit(f"--quality: {error}") from None
    values["nodes"], values["devices_per_node"] = values.pop("topology")
    return RunSpec.of(**values)
