"""The axes of a study, one declaration each: the one home of an axis's name, default, the model kinds it applies
to, its spelling in a variant (and back), its record column and its words in a report.

Standard library only: the study (core environment), the rules, the harness (framework environments, through
dlbench.vocabulary.identity), the log formats, the aggregate and the report read it, so none of them restates an axis.

    every kind   framework, model, topology, batch_size, precision, compiler, data, strategy, build, node, metric
    a model's    image_size (ResNet), seq_length (BERT, Llama), max_predictions (BERT, derived from seq_length),
                 optimizer and grad_clip (BERT), activation_checkpointing (Llama)

An axis that does not apply to a model's kind is None for that model everywhere (study, ids, records, report).
The config schema (workflow/schemas/config.schema.yaml) states the same defaults for the study's other axes;
tests/test_axes.py keeps the two in agreement.

Adding an axis of a model kind: one `Axis` in AXES (in the order its part stands in a variant); the backend reads
it from the RunSpec (`spec.<name>`). The config schema's matrix, selectors and includes (with_model_axes), the
study's configurations (`Configuration.inputs`), the ids, the rules' harness options, the harness's option
(`RunSpec.inputs`), the record schema's column (with_record_axes), the aggregate's keys, the log formats' labels,
the references' match keys and the report's table titles and plot legends follow from the declaration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MODEL_KINDS = ("resnet", "bert", "llama")
KIND_NAMES = {"resnet": "ResNet", "bert": "BERT", "llama": "Llama"}
EVERY_KIND = frozenset(MODEL_KINDS)
NOT_THIS = object()  # what an axis's `read` returns for a variant part that is not its own


def _given(value: Any) -> bool:
    """Not None and not NaN (a missing cell as pandas leaves it)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def default_max_predictions(seq_length: int) -> int:
    """BERT masked positions per sequence: Google's 20 for 128 and 80 for 512, else ceil(0.15 x length)."""
    return {128: 20, 512: 80}.get(seq_length, max(1, math.ceil(0.15 * seq_length)))


def _prefixed_int(prefix: str) -> Callable[[str], Any]:
    def read(part: str) -> Any:
        digits = part[len(prefix) :]
        return int(digits) if part.startswith(prefix) and digits.isdigit() else NOT_THIS

    return read


@dataclass(frozen=True)
class Axis:
    name: str
    default: Any  # a study's or a label's value when none is given (None: derived or required)
    kinds: frozenset[str] = EVERY_KIND  # the model kinds it applies to; None for the others
    matrix: bool = True  # a list under the study's `matrix:` (else a setting, or derived from other axes)
    option: bool = False  # a model axis the rules pass to the harness (--<name>) for the kinds it applies to
    spell: Callable[[Any], str] | None = None  # the variant's part for a value (model axes and strategy)
    read: Callable[[str], Any] | None = None  # a variant part's value, NOT_THIS when the part is another axis's
    omit_default: bool = False  # the variant names it only when not at its default (and it may be absent)
    shape: bool = False  # an input shape: a model of another kind given it ignores it (a setting is refused there)
    record: Callable[[Any, Mapping[str, Any]], Any] | None = None  # the record's value from a run's settings
    label: Callable[[Any, Mapping[str, Any]], str] | None = None  # a table title's words for a value
    legend: str | None = None  # a plot legend's words for a value ("{}" is the value)
    values: Mapping[str, Any] | None = None  # a model axis: the JSON schema of one value (config and record schemas)
    # a model kind's largest value and why ({"bert": (512, "BERT's 512 position embeddings")}): a study of such
    # models only that asks for more is refused; the schema's `values` allow every kind's
    limits: Mapping[str, tuple[int, str]] | None = None
    description: str = ""  # ... and what it means (the config schema, so the configuration reference; the record's)

    def applies_to(self, kind: str) -> bool:
        return kind in self.kinds

    def record_column(self) -> dict[str, Any]:
        """The record schema's property for this axis: its value's type, or null for the other model kinds."""
        values = self.values or {}
        kind = "string" if "enum" in values else values.get("type", "string")
        return {"description": self.description, "type": [kind, "null"]}

    def part(self, values: Mapping[str, Any]) -> str | None:
        """This axis's part of a variant, or None where the variant does not name it."""
        assert self.spell is not None
        if self.omit_default:
            value = values.get(self.name)
            value = self.default if value is None else value
            return None if value == self.default else self.spell(value)
        return self.spell(values[self.name])


def _switch(name: str, kind: str, parts: tuple[str, str], words: tuple[str, str], description: str) -> Axis:
    """A model axis that is on or off (default off), spelled in a variant as one of two parts (on, off)."""
    on, off = parts

    def read(part: str) -> Any:
        return part == on if part in parts else NOT_THIS

    return Axis(
        name,
        False,
        kinds=frozenset({kind}),
        option=True,
        values={"type": "boolean"},
        description=description,
        spell=lambda v: on if v else off,
        read=read,
        record=lambda v, _: bool(v),
        label=lambda v, _: words[0] if bool(v) else words[1],
    )


SEQ_LENGTH = 128  # the sequence length a study or a run log that says none trains at (BERT and Llama)
STRATEGY_PREFIX = "via_"  # no other part starts so (optimizers are adam or lamb)


DEFAULT_BUILD = "default"  # the study's one software per framework; a build of software.builds otherwise
BUILD_PREFIX = "build_"
BUILD_NAME = "^[a-z0-9][a-z0-9_.]*$"  # a variant part after its prefix: no '-' (it separates the parts)


# A sweep's node (sweep:), in a variant `on_<host>`, a group of nodes `on_<host>+<host>`: a host name's '-' is
# spelled '_' there ('-' separates the parts), so a node whose name has a '_' cannot be swept (refused).
NODE_PREFIX = "on_"
NODE_GROUP = "+"


def _spell_node(node: str) -> str:
    return NODE_PREFIX + node.replace("-", "_")


def _read_node(part: str) -> Any:
    return (
        part[len(NODE_PREFIX) :].replace("_", "-") if part.startswith(NODE_PREFIX) and part != NODE_PREFIX else NOT_THIS
    )


def _read_build(part: str) -> Any:
    return part[len(BUILD_PREFIX) :] if part.startswith(BUILD_PREFIX) and part != BUILD_PREFIX else NOT_THIS


def _read_strategy(part: str) -> Any:
    return part[len(STRATEGY_PREFIX) :] if part.startswith(STRATEGY_PREFIX) and part != STRATEGY_PREFIX else NOT_THIS


def _seq_label(value: Any, row: Mapping[str, Any]) -> str:
    masked: Any = row.get("max_predictions")  # derived from the sequence length (BERT); None for Llama
    return f"seq {int(value)}" + (f"/{int(masked)} masked" if _given(masked) else "")


# In the order of a variant's parts (after bs<B>-<precision>-<compiler>-<data>), then the order of record columns.
AXES: tuple[Axis, ...] = (
    Axis("framework", None),
    Axis("model", None),
    Axis("topology", None),
    Axis("precision", "fp32"),
    Axis("compiler", False),
    Axis("data", "synthetic"),
    Axis("batch_size", None),
    Axis(
        "image_size",
        224,
        kinds=frozenset({"resnet"}),
        matrix=False,  # a setting (defaults.image_size, overrides), not a list of the matrix
        option=True,
        shape=True,
        values={"type": "integer", "minimum": 1},
        description="ResNet: image height and width in pixels",
        spell=lambda v: f"img{v}",
        read=_prefixed_int("img"),
        omit_default=True,
        record=lambda v, _: v,
        label=lambda v, _: f"{int(v)}×{int(v)} px",
        legend="{} px",
    ),
    Axis(
        "seq_length",
        SEQ_LENGTH,
        kinds=frozenset({"bert", "llama"}),
        option=True,
        shape=True,
        values={"type": "integer", "minimum": 8, "maximum": 131072},
        limits={"bert": (512, "BERT's 512 position embeddings")},  # harness/bert.py; Llama's rotary ones: none
        description="BERT and Llama: tokens per sequence (BERT: 128 with 20 masked positions, 512 with 80, at most "
        "512; Llama: e.g. 2048, 8192)",
        spell=lambda v: f"seq{v}",
        read=_prefixed_int("seq"),
        record=lambda v, _: v or SEQ_LENGTH,
        label=_seq_label,
        legend="seq {}",
    ),
    Axis(
        "max_predictions",
        None,
        kinds=frozenset({"bert"}),
        matrix=False,  # derived: masked positions per sequence at the sequence length
        values={"type": "integer", "minimum": 1},
        description="BERT: masked positions per sequence",
        record=lambda v, values: v or default_max_predictions(values.get("seq_length") or SEQ_LENGTH),
    ),
    Axis(
        "optimizer",
        "adam",
        kinds=frozenset({"bert"}),
        option=True,
        values={"enum": ["adam", "lamb"]},
        description="BERT only: adam (Adam with decoupled weight decay, Google's) or lamb (NVIDIA's); ResNet-50 uses "
        "SGD with momentum, Llama AdamW",
        spell=str,
        read=lambda part: part,  # any part no other axis reads (read last)
        record=lambda v, _: "adam" if v in (None, "", "auto") else v,
        label=lambda v, _: str(v),
    ),
    _switch(
        "grad_clip",
        "bert",
        parts=("clip", "noclip"),
        words=("clip", "no clip"),
        description="BERT only: clip gradients by global norm 1.0 (off = DLPerf's 'without clip')",
    ),
    _switch(
        "activation_checkpointing",
        "llama",
        parts=("ckpt", "nockpt"),
        words=("activation checkpointing", "no checkpointing"),
        description="Llama only: recompute each decoder layer's activations in the backward pass (less memory, about "
        "a third more compute)",
    ),
    Axis("strategy", "auto", spell=lambda v: f"{STRATEGY_PREFIX}{v}", read=_read_strategy, omit_default=True),
    Axis(
        "build",
        DEFAULT_BUILD,
        spell=lambda v: f"{BUILD_PREFIX}{v}",
        read=_read_build,
        omit_default=True,
        record=lambda v, _: v or DEFAULT_BUILD,
        label=lambda v, _: f"build {v}",
        legend="build {}",
        values={"type": "string", "pattern": BUILD_NAME},
        description="the software build a run used (software.builds): default is the study's one environment per "
        "framework (envs/<framework>.yaml, software.python or software.container)",
    ),
    Axis(
        "node",
        None,
        matrix=False,  # from the study's sweep: (its nodes, a hostlist, a partition), not the matrix
        spell=_spell_node,
        read=_read_node,
        omit_default=True,
        record=lambda v, _: v,
        label=lambda v, _: f"on {v}",
        legend="on {}",
        values={"type": "string"},
        description="a sweep's node the run was pinned to (sweep:; a group of nodes joined by '+'); empty outside a "
        "sweep, where SLURM chooses",
    ),
    Axis("metric", "throughput"),
)
BY_NAME = {axis.name: axis for axis in AXES}
DEFAULTS = {axis.name: axis.default for axis in AXES if axis.default is not None}

MATRIX = tuple(a.name for a in AXES if a.matrix)  # the study's matrix axes (and what selectors may name)
MODEL_AXES = tuple(a for a in AXES if a.kinds != EVERY_KIND)  # the axes of some model kinds only
INPUTS = tuple(a.name for a in MODEL_AXES)  # their record columns: a configuration's inputs beside its axes
MODEL_MATRIX = tuple(a.name for a in MODEL_AXES if a.matrix)  # the model axes a study's matrix lists
OPTIONS = tuple(a for a in MODEL_AXES if a.option)  # the model axes the harness takes as options (--<name>)
# The axes of every model kind that a variant names only away from their defaults (strategy, build): a
# configuration's columns after its model inputs (records, summary, report tables and plots).
NAMED_AWAY = tuple(a.name for a in AXES if a.kinds == EVERY_KIND and a.omit_default)
# The parts a variant spells after its first four, in order; reading them back tries the catch-all last.
SPELLED = tuple(a for a in AXES if a.spell is not None)
READ_ORDER = (*(a for a in SPELLED if a.name != "optimizer"), BY_NAME["optimizer"])


def of_kind(kind: str) -> tuple[Axis, ...]:
    """The model axes that apply to a model kind, in variant order."""
    return tuple(a for a in MODEL_AXES if a.applies_to(kind))


def matrix_axes_of_kind(kind: str) -> tuple[str, ...]:
    """The model axes of the matrix that vary for a model kind (BERT's, Llama's; none for ResNet)."""
    return tuple(a.name for a in of_kind(kind) if a.matrix)


def kinds_in_words(axis: str) -> str:
    """The model kinds an axis applies to, in words ('BERT and Llama')."""
    return " and ".join(KIND_NAMES[k] for k in MODEL_KINDS if k in BY_NAME[axis].kinds)


def models_in_words(axis: str) -> str:
    """Which models an axis applies to, in words ('BERT and Llama models')."""
    return kinds_in_words(axis) + " models"


def inputs_of(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """A run's model inputs as its record holds them: each model axis's value (its default where the settings give
    none), None for the axes of other kinds."""
    return {
        a.name: a.record(values.get(a.name), values) if a.applies_to(kind) and a.record is not None else None
        for a in MODEL_AXES
    }


def input_words(row: Mapping[str, Any]) -> list[str]:
    """A configuration's model inputs in a table title's words, in variant order ('seq 128/20 masked', 'adam')."""
    return [a.label(row.get(a.name), row) for a in MODEL_AXES if a.label is not None and _given(row.get(a.name))]


def with_model_axes(schema: dict[str, Any]) -> dict[str, Any]:
    """The config schema with the model axes of the matrix declared here: a list of values under `matrix`, one value
    in a selector (exclude, overrides' match) and in an include entry, each placed before `strategy` (so the schema
    file does not restate them)."""
    defs = schema["$defs"]
    places = (
        (schema["properties"]["matrix"]["properties"], _matrix_entry),
        (defs["selector"]["properties"], lambda axis: dict(axis.values or {})),
        (defs["include_entry"]["properties"], lambda axis: dict(axis.values or {})),
    )
    for properties, entry in places:
        _insert_before_strategy(properties, {axis.name: entry(axis) for axis in MODEL_AXES if axis.matrix})
    return schema


def with_record_axes(schema: dict[str, Any]) -> dict[str, Any]:
    """The record schema with a column per model axis declared here, before `strategy` (records.csv's order)."""
    _insert_before_strategy(schema["properties"], {axis.name: axis.record_column() for axis in MODEL_AXES})
    return schema


def _insert_before_strategy(properties: dict[str, Any], added: dict[str, Any]) -> None:
    before = {k: v for k, v in properties.items() if k not in added}
    properties.clear()
    for key, value in before.items():
        if key == "strategy":
            properties.update(added)
        properties[key] = value


def _matrix_entry(axis: Axis) -> dict[str, Any]:
    return {
        "description": axis.description,
        "type": "array",
        "minItems": 1,
        "uniqueItems": True,
        "items": dict(axis.values or {}),
        "default": [axis.default],
    }
