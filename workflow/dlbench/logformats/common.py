"""What the formats of other projects' logs share: labels, run identity, records and error records.

Not a format itself (FORMATS does not list it). An external log says only part of what a record holds; the
import's `labels` say the rest, and win where both speak (they are the study's own names for things):

    framework, model, topology, batch_size (per device), precision, compiler, data,      record fields
    a model's inputs (the model axes of dlbench.vocabulary.axes), strategy,
    repeat, device_name, framework_version
    variant, config_id, run_id, run_set                                                 identity

Identity (dlbench.vocabulary.identity's shape): config id `<model>/<framework>/<topology>/<variant>`, with `unknown`
for an axis neither the log nor the labels give; the variant is identity.variant() when every axis is known,
else the known ones joined the same way (bs<B>-<precision>-...), else the format's fallback (e.g. MLPerf's
result directory name). Run id: `<config id>/rep<N>`, or `<config id>/<file stem>` where the format names
runs by file (MLPerf's result_N). A log that gives only a device count is taken as one node (1x<devices>).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..collect.records import FIELDS, LogError, complete
from ..vocabulary import identity
from ..vocabulary.axes import INPUTS, of_kind

AXIS_LABELS = frozenset(
    {
        "framework",
        "model",
        "topology",
        "batch_size",
        "precision",
        "compiler",
        "data",
        *INPUTS,  # a model kind's inputs (dlbench.vocabulary.axes)
        "strategy",
        "repeat",
        "device_name",
        "framework_version",
    }
)
IDENTITY_LABELS = frozenset({"variant", "config_id", "run_id", "run_set"})
RECORD_LABELS = AXIS_LABELS | IDENTITY_LABELS
UNKNOWN = "unknown"

# Rank prefixes launchers put before every line of a rank's output: mpirun's `[1,3]<stdout>:`, srun -l's `3: `.
_RANK_PREFIX = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:|^\s*(\d+): ")


def check_labels(labels: Mapping[str, Any], options: Iterable[str], source: str) -> None:
    """Refuse a label the format does not read (a typo would otherwise be ignored silently)."""
    unknown = sorted(set(labels) - RECORD_LABELS - set(options))
    if unknown:
        known = ", ".join(sorted(RECORD_LABELS | set(options)))
        raise LogError(f"{source}: unknown label(s) {', '.join(unknown)} (known: {known})")
    if labels.get("topology"):
        try:
            identity.parse_topology(str(labels["topology"]))
        except identity.IdentityError as error:
            raise LogError(f"{source}: label {error}") from None


def other_rank(prefix: str) -> bool:
    """Text before a record marker that says the line comes from a rank other than 0."""
    match = _RANK_PREFIX.search(prefix)
    return match is not None and int(match.group(1) or match.group(2)) != 0


def rank0_text(line: str) -> str | None:
    """A line without its launcher's rank prefix; None when another rank than 0 wrote it."""
    match = _RANK_PREFIX.match(line)
    if not match:
        return line
    return None if int(match.group(1) or match.group(2)) != 0 else line[match.end() :]


def _variant(fields: Mapping[str, Any]) -> str | None:
    """identity.variant() when every axis it needs is known, else the known axes joined the same way."""
    kind = identity.model_kind(str(fields.get("model")))
    needed = ["batch_size", "precision", "compiler", "data"]
    needed += [a.name for a in of_kind(kind) if a.spell is not None and not a.omit_default]
    if all(fields.get(axis) is not None for axis in needed):
        return identity.variant(fields)
    parts = [
        f"bs{fields['batch_size']}" if fields.get("batch_size") else None,
        fields.get("precision"),
        None if fields.get("compiler") is None else ("compile" if fields["compiler"] else "nocompile"),
        fields.get("data"),
    ]
    return "-".join(str(p) for p in parts if p) or None


def resolve(read: Mapping[str, Any], labels: Mapping[str, Any]) -> dict[str, Any]:
    """What the log says (`read`, None = not said) with the labels' axes over it, and topology, nodes,
    devices_per_node, devices, batch_size and global_batch_size completed from whichever of them is known."""
    fields: dict[str, Any] = {k: v for k, v in read.items() if v is not None}
    fields.update((k, v) for k, v in labels.items() if k in AXIS_LABELS or k == "run_set")
    nodes: int | None = None
    per_node: int | None = None
    if fields.get("topology"):
        nodes, per_node = identity.parse_topology(fields["topology"])
    elif fields.get("nodes") and fields.get("devices_per_node"):
        nodes, per_node = fields["nodes"], fields["devices_per_node"]
    elif fields.get("devices"):
        nodes, per_node = 1, fields["devices"]
    if nodes and per_node:  # each branch that knows the nodes knows a positive count per node
        fields.update(topology=f"{nodes}x{per_node}", nodes=nodes, devices_per_node=per_node, devices=nodes * per_node)
    devices, batch, global_batch = fields.get("devices"), fields.get("batch_size"), fields.get("global_batch_size")
    if devices and batch and not global_batch:
        fields["global_batch_size"] = batch * devices
    elif devices and global_batch and not batch and global_batch % devices == 0:
        fields["batch_size"] = global_batch // devices
    return fields


def external_record(
    source: str,
    path: Path,
    read: Mapping[str, Any],
    labels: Mapping[str, Any],
    *,
    definition: str,
    variant_fallback: str | None = None,
    variant_extra: Iterable[str] = (),
    run_name: str | None = None,
) -> dict[str, Any]:
    """One validated record from what the log says (`read`) and the labels (which win).

    variant_extra: format-specific parts appended to the variant (e.g. tf_cnn_benchmarks' variable_update);
    run_name: the run's name inside its configuration when the format names runs by file."""
    fields = resolve(read, labels)
    fields.setdefault("model", UNKNOWN)
    fields.setdefault("framework", UNKNOWN)
    variant = (
        labels.get("variant")
        or "-".join(p for p in (_variant(fields), *variant_extra) if p)
        or variant_fallback
        or UNKNOWN
    )
    config = labels.get("config_id") or (
        f"{fields['model']}/{fields['framework']}/{fields.get('topology') or UNKNOWN}/{variant}"
    )
    if labels.get("run_id"):
        run = labels["run_id"]
    elif run_name or not fields.get("repeat"):
        run = f"{config}/{run_name or path.stem}"
    else:
        run = identity.run_id(config, fields["repeat"])
    fields.update(config_id=config, run_id=run, source=source, log_path=str(path))
    fields.setdefault("throughput_definition", definition)
    return complete(fields)


def error_record(
    source: str,
    path: Path,
    error: str,
    labels: Mapping[str, Any],
    *,
    definition: str,
    read: Mapping[str, Any] | None = None,
    **identity_hints: Any,
) -> dict[str, Any]:
    """An `error` record: the run is listed (with what is known of it) and the message names file and line."""
    read = {k: v for k, v in (read or {}).items() if k in FIELDS}
    read |= {"status": "error", "error": error, "throughput": None}
    return external_record(source, path, read, labels, definition=definition, **identity_hints)


def repeat_from_name(path: Path) -> int | None:
    """The repeat a file name gives: r3.log, rep3.log, <...>_3.log -> 3 (result_N is MLPerf's, 0-based). Repeats
    count from 1: a name numbered 0 (…_0.log, a 0-based series) gives none, and the run is named by its file."""
    match = re.search(r"(?:^r|^rep|_)(\d+)$", path.stem)
    return int(match.group(1)) or None if match else None
