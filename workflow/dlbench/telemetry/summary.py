"""A run's telemetry (the sampler's lines in its log) summarised over its measured window (core environment).

Windows come from rank 0's `window` line (wall-clock start and end of warm-up and of the measured window).
Cumulative counters (CPU seconds, energy) are read at a window's ends by linear interpolation between the two
samples around each end; readings (utilisation, clocks, power) are averaged over the samples inside it.
Energy: the NVML total-energy counter where every GPU has one, else power integrated over the window (trapezoids),
plus RAPL package and DRAM where readable; `energy_scope` says which. What is unavailable stays None with its
reason, never zero.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

# A run is `contended` when processes outside it used more than this many cores on average during its
# measured window (on any node): a tenth of a core is well above a quiet node's daemons (~0.01 here) and
# enough to cost a CPU-bound run a few percent.
CONTENTION_MAX_CORES = 0.10

FIELDS = (
    "telemetry",
    "telemetry_interval_ms",
    "cpu_run_cores",
    "cpu_rank_cores",
    "cpu_warmup_run_cores",
    "cpu_node_util",
    "cpu_freq_mhz_mean",
    "contention_cores",
    "contended",
    "sampler_cores",
    "rapl",
    "gpu_telemetry",
    "gpu_util_mean",
    "gpu_mem_util_mean",
    "gpu_mem_used_max_bytes",
    "gpu_sm_clock_mean_mhz",
    "gpu_sm_clock_min_mhz",
    "gpu_mem_clock_mean_mhz",
    "gpu_temp_max_c",
    "throttled",
    "throttle_reasons",
    "gpu_energy_j",
    "gpu_energy_source",
    "cpu_energy_j",
    "energy_j",
    "energy_scope",
    "energy_per_sample_j",
    "samples_per_j",
    "power_mean_w",
    "power_max_w",
    "cpu_governor",
    "cpu_turbo",
    "gpu_app_clocks",
    "gpu_persistence",
    "gpu_other_processes",
)


def unwrap(values: Sequence[float], top: float) -> list[float]:
    """A counter that wraps to 0 after `top` (RAPL's max_energy_range_uj) made monotonic: a reading below the
    one before means the counter passed `top` once in between (the sampling interval is far shorter than a wrap)."""
    out, offset = [], 0.0
    for i, v in enumerate(values):
        if i and v < values[i - 1]:
            offset += top + 1
        out.append(v + offset)
    return out


def at(ts: Sequence[float], values: Sequence[float], t: float) -> float:
    """A cumulative series at time t, linearly interpolated (clamped to its first and last sample)."""
    i = bisect_left(ts, t)
    if i == 0:
        return values[0]
    if i >= len(ts):
        return values[-1]
    t0, t1 = ts[i - 1], ts[i]
    return values[i - 1] + (values[i] - values[i - 1]) * (t - t0) / (t1 - t0) if t1 > t0 else values[i]


def delta(ts: Sequence[float], values: Sequence[float], start: float, end: float) -> float:
    return at(ts, values, end) - at(ts, values, start)


def integrate(ts: Sequence[float], watts: Sequence[float], start: float, end: float) -> float:
    """Energy (J) of a power series over [start, end]: trapezoids of the running integral, interpolated at the ends."""
    running = [0.0]
    for i in range(1, len(ts)):
        running.append(running[-1] + (watts[i] + watts[i - 1]) / 2 * (ts[i] - ts[i - 1]))
    return delta(ts, running, start, end)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _host(lines: list[dict[str, Any]], start: float, end: float, warmup: tuple[float, float] | None) -> dict[str, Any]:
    head = next(e for e in lines if e.get("kind") == "start")
    samples = [e for e in lines if e.get("kind") == "sample"]
    end_line = next((e for e in lines if e.get("kind") == "end"), None)
    ts = [s["t"] for s in samples]
    # Readings inside the window; a window shorter than the interval gets the sample nearest its middle.
    middle = (start + end) / 2
    inside = [s for s in samples if start <= s["t"] <= end] or [min(samples, key=lambda s: abs(s["t"] - middle))]
    span = end - start
    out: dict[str, Any] = {}
    busy = [s["node_busy_s"] for s in samples]
    total = [s["node_total_s"] for s in samples]
    ranks = sorted({k for s in samples for k in s["run_s"] if k != "parent"}, key=int)
    run = [sum(s["run_s"].values()) for s in samples]
    mine = [s["sampler_s"] for s in samples]
    out["cpu_run_cores"] = delta(ts, run, start, end) / span
    out["cpu_rank_cores"] = ";".join(
        f"{delta(ts, [s['run_s'].get(r, 0.0) for s in samples], start, end) / span:.3f}" for r in ranks
    )
    if warmup and warmup[1] > warmup[0]:
        out["cpu_warmup_run_cores"] = delta(ts, run, *warmup) / (warmup[1] - warmup[0])
    node_busy = delta(ts, busy, start, end)
    node_total = delta(ts, total, start, end)
    # busy and total are interpolated separately at the window's ends: a node busy throughout reads 1 + rounding
    out["cpu_node_util"] = min(1.0, node_busy / node_total) if node_total > 0 else None
    out["contention_cores"] = max(0.0, node_busy - delta(ts, run, start, end) - delta(ts, mine, start, end)) / span
    out["cpu_freq_mhz_mean"] = _mean([s["freq_mhz"] for s in inside if s.get("freq_mhz")])
    if end_line and end_line.get("sampler_wall_s"):
        out["sampler_cores"] = end_line["sampler_cpu_s"] / end_line["sampler_wall_s"]
    cpu, rapl = head["cpu"], head["rapl"]
    out["cpu_governor"], out["cpu_turbo"] = cpu.get("governor"), cpu.get("turbo")
    if rapl["available"]:
        out["rapl"] = "readable: " + ", ".join(rapl["zones"])
        joules = 0.0
        for zone, top in rapl["zones"].items():
            if "psys" in zone:
                continue  # platform total: would count package and DRAM twice
            series = unwrap([s.get("rapl_uj", {}).get(zone, 0) for s in samples], top)
            joules += delta(ts, series, start, end) / 1e6
        out["cpu_energy_j"] = joules
    else:
        out["rapl"] = f"unavailable: {rapl['why_missing']}"
    gpu = head["gpu"]
    if not gpu["available"]:
        out["gpu_telemetry"] = f"unavailable: {gpu['why_missing']}"
        return out
    devices = gpu["devices"]
    out["gpu_telemetry"] = f"nvml: {len(devices)} GPU(s)"
    out["gpu_app_clocks"] = ";".join(f"{d.get('app_clock_sm_mhz')}/{d.get('app_clock_mem_mhz')} MHz" for d in devices)
    out["gpu_persistence"] = ";".join(str(d.get("persistence_mode")) for d in devices)
    out["gpu_other_processes"] = ";".join(",".join(map(str, d.get("other_processes") or [])) or "none" for d in devices)
    per = [g for s in inside for g in s.get("gpus", [])]
    pick = lambda key: [g[key] for g in per if g.get(key) is not None]  # noqa: E731
    out["gpu_util_mean"], out["gpu_mem_util_mean"] = _mean(pick("util")), _mean(pick("mem_util"))
    out["gpu_mem_used_max_bytes"] = max(pick("mem_used"), default=None)
    out["gpu_sm_clock_mean_mhz"], out["gpu_sm_clock_min_mhz"] = _mean(pick("sm_mhz")), min(pick("sm_mhz"), default=None)
    out["gpu_mem_clock_mean_mhz"] = _mean(pick("mem_mhz"))
    out["gpu_temp_max_c"] = max(pick("temp_c"), default=None)
    from .sampler import THROTTLE_MASK

    reasons = {r & THROTTLE_MASK for r in pick("throttle")} - {0}
    out["throttled"] = bool(reasons) if pick("throttle") else None
    out["throttle_reasons"] = ";".join(sorted(f"{r:#x}" for r in reasons))
    sums = [sum(g["power_w"] for g in s["gpus"] if g.get("power_w") is not None) for s in inside]
    out["power_max_w"] = max(sums, default=None)
    n = len(devices)
    counters = [[s["gpus"][i].get("energy_mj") for s in samples] for i in range(n)]
    if all(v is not None for c in counters for v in c):
        out["gpu_energy_j"] = sum(delta(ts, c, start, end) for c in counters) / 1000
        out["gpu_energy_source"] = "nvml energy counter"
    else:
        power = [[s["gpus"][i].get("power_w") or 0.0 for s in samples] for i in range(n)]
        out["gpu_energy_j"] = sum(integrate(ts, p, start, end) for p in power)
        out["gpu_energy_source"] = "nvml power integrated (no energy counter)"
    return out


SUMMED = ("cpu_run_cores", "cpu_warmup_run_cores", "cpu_energy_j", "gpu_energy_j", "power_max_w", "sampler_cores")
MAXED = ("contention_cores", "gpu_mem_used_max_bytes", "gpu_temp_max_c")


def summarise(telemetry: list[dict[str, Any]], window: dict[str, Any] | None, samples: int | None) -> dict[str, Any]:
    """Record fields (FIELDS) from a log's telemetry lines and its window line; all None with telemetry off."""
    out: dict[str, Any] = dict.fromkeys(FIELDS)
    if not telemetry:
        out["telemetry"] = "off"
        return out
    unavailable = next((e for e in telemetry if e.get("kind") == "unavailable"), None)
    if unavailable:
        out["telemetry"] = f"unavailable: {unavailable.get('why')}"
        return out
    if not window:
        out["telemetry"] = "no measured window (the run did not reach its measured steps)"
        return out
    hosts: dict[str, list[dict[str, Any]]] = {}
    host = ""
    for e in telemetry:  # the sampler's own file names its host on the start line only
        host = e.get("host", host)
        hosts.setdefault(host, []).append(e)
    start, end = window["measure_start"], window["measure_end"]
    warmup_start, warmup_end = window.get("warmup_start"), window.get("warmup_end")
    warmup = (warmup_start, warmup_end) if warmup_start is not None and warmup_end is not None else None
    parts = []
    for lines in hosts.values():
        if not any(e.get("kind") == "sample" for e in lines) or not any(e.get("kind") == "start" for e in lines):
            continue
        parts.append(_host(lines, start, end, warmup))
    if not parts or end <= start:
        out["telemetry"] = "no samples"
        return out
    first = next(e for e in telemetry if e.get("kind") == "start")
    out["telemetry"] = "ok"
    out["telemetry_interval_ms"] = first["interval_ms"]
    for key in FIELDS:
        values = [p[key] for p in parts if p.get(key) is not None]
        if not values or out[key] is not None:
            continue
        if key in SUMMED:
            out[key] = sum(values)
        elif key in MAXED:
            out[key] = max(values)
        elif isinstance(values[0], bool):
            out[key] = any(values)
        elif isinstance(values[0], float | int):
            out[key] = sum(values) / len(values)
        else:
            out[key] = ";".join(dict.fromkeys(map(str, values)))
    out["contended"] = out["contention_cores"] is not None and out["contention_cores"] > CONTENTION_MAX_CORES
    energies = [(k, out[k]) for k in ("gpu_energy_j", "cpu_energy_j") if out[k] is not None]
    if energies:
        out["energy_j"] = sum(v for _, v in energies)
        out["energy_scope"] = " + ".join(
            f"GPU ({out['gpu_energy_source']})" if k == "gpu_energy_j" else "CPU package + DRAM (RAPL)"
            for k, _ in energies
        )
        out["power_mean_w"] = out["energy_j"] / (end - start)
        if samples and out["energy_j"] > 0:
            out["energy_per_sample_j"] = out["energy_j"] / samples
            out["samples_per_j"] = samples / out["energy_j"]
    return out
