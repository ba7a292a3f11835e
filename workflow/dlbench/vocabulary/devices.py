"""GPU peaks for MFU: workflow/references/device_peaks.yaml, matched to the device name a run records (core
environment and benchmark scripts: standard library + yaml only).

MFU = achieved model FLOP/s per device / the device's dense peak for the math the run used. The peak comes from the
table only: a device the table does not name (any CPU, an unlisted GPU) or a precision it leaves null has no peak
and so no MFU, with the reason said, never a fallback figure. A device name matched by two entries is an error in
the table (TableError), never resolved by order.

Which peak a run is held to (peak_tflops):
  amp   its autocast dtype (bf16 or fp16; unknown: bf16 where the device has it, else fp16)
  fp32  TF32 tensor cores when the run had TF32 on, else the FP32 (CUDA core) peak; unknown: the TF32 peak where the
        device has one, the higher of the two, so that an MFU is never overstated
  tf32, bf16, fp16  that peak (precision labels of imported logs)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..harness.peak import RECORD_KEYS as PEAK_RECORD_KEYS

PEAKS_PATH = Path(__file__).resolve().parents[2] / "references" / "device_peaks.yaml"
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # the table's peak keys, TFLOP/s
# What environment lines and logs call the autocast dtypes.
DTYPE_NAMES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16"}
# Settings keys (a backend's settings_in_effect) that say whether fp32 matrix products ran on TF32 tensor cores:
# PyTorch's matmul and cuDNN switches, TensorFlow's tensor_float_32_execution.
TF32_SETTINGS = ("tf32_matmul", "tf32_cudnn", "tf32")


NO_ENTRY = "no peak known for"  # how describe() begins for a device the table does not have


class TableError(ValueError):
    """device_peaks.yaml is malformed, or a device name matches more than one of its entries."""


@dataclass(frozen=True)
class Device:
    """One entry of the table: its dense peaks in TFLOP/s (None: not known for sure)."""

    name: str
    patterns: tuple[re.Pattern[str], ...]
    examples: tuple[str, ...]
    peaks: dict[str, float | None]
    datasheet: str
    note: str
    # A CPU's peak is its node's (every core together, as measured): MFU divides by nodes, not by ranks
    per_node: bool = False

    def matches(self, device_name: str) -> bool:
        return any(p.search(device_name) for p in self.patterns)


def _device(entry: dict[str, Any]) -> Device:
    missing = [k for k in ("name", "patterns", "datasheet", *PRECISIONS) if k not in entry]
    if missing:
        raise TableError(f"{PEAKS_PATH.name}: entry {entry.get('name')!r} lacks {', '.join(missing)}")
    peaks = {k: None if entry[k] is None else float(entry[k]) for k in PRECISIONS}
    return Device(
        name=str(entry["name"]),
        patterns=tuple(re.compile(p, re.IGNORECASE) for p in entry["patterns"]),
        examples=tuple(entry.get("examples") or ()),
        peaks=peaks,
        datasheet=str(entry["datasheet"]),
        note=str(entry.get("note") or ""),
    )


def load_table(path: str | Path = PEAKS_PATH) -> tuple[Device, ...]:
    """Every device of the table, in its order."""
    return tuple(_device(entry) for entry in yaml.safe_load(Path(path).read_text())["devices"])


@lru_cache(maxsize=1)
def _default_table() -> tuple[Device, ...]:
    return load_table()


def with_measured_cpus(measured: list[dict[str, Any]]) -> tuple[Device, ...]:
    """The GPU table and, per CPU model, the highest of the peaks measured on it in each format (dlbench.harness.peak's
    records: cpu, library, gflops (fp32), bf16_gflops, and the reason where a record has no figure: then the CPU's
    entry has no peak in that format and says why). A CPU entry matches exactly the name runs record for that CPU
    (dlbench.harness.sysinfo.cpu_model)."""
    by_cpu: dict[str, list[dict[str, Any]]] = {}
    for record in measured:
        by_cpu.setdefault(record["cpu"], []).append(record)
    cpus = []
    for cpu, records in by_cpu.items():
        peaks: dict[str, float | None] = {"fp32": None, "tf32": None, "bf16": None, "fp16": None}
        sources, missing = [], []
        for fmt, (key, why) in PEAK_RECORD_KEYS.items():
            figures = [r for r in records if r.get(key) is not None]
            if figures:
                best = max(figures, key=lambda r: r[key])
                peaks[fmt] = best[key] / 1000
                sources.append(f"{fmt} GEMM in {best['library']}")
            else:  # a record from before bf16 was measured has no key and no reason
                reasons = sorted({str(r.get(why) or "not measured") for r in records})
                missing.append(f"{fmt} not measured: {'; '.join(reasons)}")
        first = records[0]
        cpus.append(
            Device(
                name=cpu,
                patterns=(re.compile(f"^{re.escape(cpu)}$"),),
                examples=(cpu,),
                peaks=peaks,
                datasheet=f"measured: {', '.join(sources)}, {first['threads']} threads, on {first['host']} "
                f"at {first['date']}",
                note="; ".join(missing) or "a CPU's peaks are measured in fp32 and bf16",
                per_node=True,
            )
        )
    return _default_table() + tuple(cpus)


def find_device(device_name: str | None, table: tuple[Device, ...] | None = None) -> Device | None:
    """The one entry whose patterns match `device_name`; None when none does. Two matches: TableError."""
    if not device_name:
        return None
    found = [d for d in (table if table is not None else _default_table()) if d.matches(device_name)]
    if len(found) > 1:
        raise TableError(
            f"device {device_name!r} matches {', '.join(d.name for d in found)} in "
            f"{PEAKS_PATH.name}: its patterns must tell them apart"
        )
    return found[0] if found else None


def run_math(precision: str | None, environment: dict[str, Any]) -> str | None:
    """The matrix math a run used, from its log's environment line: fp16 or bf16 (amp: the autocast dtype), tf32
    (fp32 with TF32 tensor cores on: any of the backend's TF32 switches), fp32 (on a CPU, or every TF32 switch off);
    None where the line does not say (the peak then assumes the higher, see peak_tflops)."""
    if precision == "amp":
        return DTYPE_NAMES.get(str(environment.get("amp_dtype") or "").lower())
    if precision != "fp32":
        return precision if precision in PRECISIONS else None
    if environment.get("device_type") == "cpu":
        return "fp32"
    settings = environment.get("settings") or {}
    switches = [settings[k] for k in TF32_SETTINGS if settings.get(k) is not None]
    if not switches:
        return None
    return "tf32" if any(switches) else "fp32"


def peak_tflops(
    device_name: str | None,
    precision: str | None,
    tf32: bool | None = None,
    amp_dtype: str | None = None,
    table: tuple[Device, ...] | None = None,
) -> tuple[float | None, str]:
    """(dense peak in TFLOP/s, its source) for a run on `device_name` at `precision` (fp32 or amp, or an import's
    tf32 / bf16 / fp16); (None, why) where there is none. tf32: the run had TF32 math on (None: unknown); amp_dtype:
    its autocast dtype (bfloat16 / float16 or bf16 / fp16; None: unknown)."""
    if not device_name:
        return None, "no device name recorded"
    if not precision:
        return None, "no precision recorded"
    device = find_device(device_name, table)
    if device is None:
        return None, f"no peak known for device {device_name!r}"
    peaks, assumed = device.peaks, ""
    if precision == "amp":
        key = DTYPE_NAMES.get(str(amp_dtype or "").lower())
        if key is None:
            key = "bf16" if peaks["bf16"] is not None else "fp16"
            assumed = f"; amp dtype not recorded: {key} assumed"
    elif precision == "fp32":
        if tf32 is None:
            key = "tf32" if peaks["tf32"] is not None else "fp32"
            assumed = "; TF32 use not recorded: the TF32 peak, the higher" if key == "tf32" else ""
        else:
            key = "tf32" if tf32 and peaks["tf32"] is not None else "fp32"
    elif precision in PRECISIONS:
        key = str(precision)
    else:
        return None, f"no peak for precision {precision!r}"
    value = peaks[key]
    if value is None:
        return None, f"no {key} peak known for {device.name} ({device.note})"
    return value, f"{device.name} dense {key} {value:g} TFLOP/s ({device.datasheet}){assumed}"


def peak_for_run(
    device_name: str | None, precision: str | None, math_dtype: str | None, table: tuple[Device, ...] | None = None
) -> tuple[float | None, str]:
    """peak_tflops for a record: its precision and math_dtype (run_math's answer: fp32, tf32, bf16, fp16 or None)."""
    tf32 = {"tf32": True, "fp32": False}.get(str(math_dtype)) if precision == "fp32" else None
    amp_dtype = math_dtype if precision == "amp" else None
    return peak_tflops(device_name, precision, tf32=tf32, amp_dtype=amp_dtype, table=table)


def describe(device_name: str, table: tuple[Device, ...] | None = None) -> str:
    """One line for the report's environment: the peaks MFU uses for this device, or why it has none."""
    device = find_device(device_name, table)
    if device is None:
        return f"{NO_ENTRY} {device_name!r}: no MFU"
    label = "" if device.name == device_name else f"{device.name}: "  # a measured CPU is named as its runs name it
    known = [f"{k} {v:g}" for k, v in device.peaks.items() if v is not None]
    if not known:
        return f"{label}no peak known ({device.note}): no MFU"
    return f"{label}dense {', '.join(known)} TFLOP/s ({device.datasheet})"
