"""`python -m dlbench.telemetry.sampler`: sample this node while a run trains (core environment: psutil, NVML).

Started by the supervisor (dlbench.harness) off the timed path, one per node, and stopped with SIGTERM when the
ranks are done. Writes JSON lines to --out: `start` (what is readable and why not, provenance), one `sample` per
interval (cumulative counters: CPU seconds, RAPL and NVML energy; instantaneous readings: utilisation, clocks,
power, temperature), `end` (the sampler's own CPU time). Counters are stored raw; dlbench.telemetry.summary
splits them into the warm-up and measured windows by timestamp. A source that cannot be read is recorded as
unavailable with the reason, never as zero.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import psutil

# The fastest interval worth sampling at: NVML refreshes utilisation and power no more often than about every
# 100 ms; without NVML, process CPU times tick at 10 ms (USER_HZ), so 20 ms still separates two readings.
MIN_INTERVAL_MS_NVML = 100
MIN_INTERVAL_MS_CPU = 20
TREE_REFRESH_S = 1.0  # re-list the run's process tree this often (a full /proc scan each sample costs CPU)
RAPL_ROOT = Path("/sys/class/powercap")
# NVML clock-event reasons that mean the GPU ran slower than it could: SW power cap, HW slowdown, SW thermal,
# HW thermal, HW power brake (idle, application-clock setting and display clocks are not throttling).
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class Rapl:
    """Package and DRAM energy counters (µJ) of intel-rapl* powercap zones, with each zone's wrap range."""

    def __init__(self, root: Path = RAPL_ROOT) -> None:
        self.zones: dict[str, tuple[Path, int]] = {}
        self.reason = ""
        zones = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
        if not zones:
            self.reason = f"no {root}/intel-rapl* zones (a VM, or no RAPL driver)"
            return
        denied = []
        for zone in zones:
            name = read_text(zone / "name") or zone.name
            energy, top = zone / "energy_uj", read_text(zone / "max_energy_range_uj")
            if read_text(energy) is None or top is None:
                denied.append(zone.name)
                continue
            self.zones[f"{zone.name}:{name}"] = (energy, int(top))
        if not self.zones:
            self.reason = f"{', '.join(denied)}: energy_uj not readable (permission: root only since Linux 5.10)"

    def read(self) -> dict[str, int]:
        out = {}
        for key, (path, _) in self.zones.items():
            text = read_text(path)
            if text is not None:
                out[key] = int(text)
        return out


class Nvml:
    """The node's NVIDIA GPUs (those CUDA_VISIBLE_DEVICES names, when it holds indices) through nvidia-ml-py."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.reason = ""
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py is not installed in the core environment"
            return
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML: {exc}"
            return
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        indices = [int(i) for i in visible.split(",") if i.strip().isdigit()] or list(range(count))  # UUIDs: all
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices if i < count]
        if not self.handles:
            self.reason = f"NVML sees {count} GPU(s), none of them visible to the run ({visible!r})"

    def _get(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nv, fn)(*args)
        except self.nv.NVMLError:
            return None

    def provenance(self, run_pids: set[int]) -> list[dict[str, Any]]:
        nv, out = self.nv, []
        for h in self.handles:
            procs = (self._get("nvmlDeviceGetComputeRunningProcesses", h) or []) + (
                self._get("nvmlDeviceGetGraphicsRunningProcesses", h) or []
            )
            energy = self._get("nvmlDeviceGetTotalEnergyConsumption", h)
            out.append(
                {
                    "name": self._get("nvmlDeviceGetName", h),
                    "uuid": self._get("nvmlDeviceGetUUID", h),
                    "persistence_mode": self._get("nvmlDeviceGetPersistenceMode", h),
                    "app_clock_sm_mhz": self._get("nvmlDeviceGetApplicationsClock", h, nv.NVML_CLOCK_SM),
                    "app_clock_mem_mhz": self._get("nvmlDeviceGetApplicationsClock", h, nv.NVML_CLOCK_MEM),
                    "power_limit_w": (self._get("nvmlDeviceGetEnforcedPowerLimit", h) or 0) / 1000 or None,
                    "energy_counter": energy is not None,
                    "other_processes": sorted({p.pid for p in procs} - run_pids),
                }
            )
        return out

    def read(self) -> list[dict[str, Any]]:
        nv, out = self.nv, []
        for h in self.handles:
            util = self._get("nvmlDeviceGetUtilizationRates", h)
            mem = self._get("nvmlDeviceGetMemoryInfo", h)
            power = self._get("nvmlDeviceGetPowerUsage", h)
            reasons = self._get("nvmlDeviceGetCurrentClocksEventReasons", h)
            if reasons is None:
                reasons = self._get("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            out.append(
                {
                    "util": util.gpu if util else None,
                    "mem_util": util.memory if util else None,
                    "mem_used": mem.used if mem else None,
                    "sm_mhz": self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
                    "mem_mhz": self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
                    "power_w": power / 1000 if power is not None else None,
                    "temp_c": self._get("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU),
                    "throttle": reasons,
                    "energy_mj": self._get("nvmlDeviceGetTotalEnergyConsumption", h),
                }
            )
        return out


def cpu_provenance() -> dict[str, Any]:
    cpufreq = Path("/sys/devices/system/cpu")
    governor = read_text(cpufreq / "cpu0/cpufreq/scaling_governor")
    no_turbo = read_text(cpufreq / "intel_pstate/no_turbo")
    boost = read_text(cpufreq / "cpufreq/boost")
    turbo = {"0": True, "1": False}.get(no_turbo) if no_turbo is not None else {"1": True, "0": False}.get(boost or "")
    return {
        "governor": governor,
        "turbo": turbo,
        "why_missing": "" if governor else "no cpufreq in /sys (a VM, or no cpufreq driver)",
    }


class Tree:
    """CPU seconds of the run's processes: each rank's process tree, plus a parent's own time (the supervisor).
    `match` finds the ranks by command line instead (under srun the ranks' pids are not ours)."""

    def __init__(self, pids: list[int], parent: int | None, match: str, exclude: int) -> None:
        self.roots, self.parent, self.match, self.exclude = pids, parent, match, exclude
        self.members: dict[int, list[psutil.Process]] = {}
        self.last: dict[int, float] = {}  # each rank's own last reading
        self.refreshed = 0.0

    def _find(self) -> list[int]:
        found = []
        for p in psutil.process_iter(["cmdline"]):
            words = p.info["cmdline"] or []
            cmd = " ".join(words)
            launcher = bool(words) and Path(words[0]).name == "srun"  # names the ranks' command, is not a rank
            if "dlbench.harness.rank" in cmd and self.match in cmd and not launcher:
                found.append(p.pid)
        return found

    def refresh(self) -> None:
        if self.match and not self.roots:
            self.roots = self._find()
        members = {}
        for pid in self.roots:
            try:
                root = psutil.Process(pid)
                members[pid] = [root, *(c for c in root.children(recursive=True) if c.pid != self.exclude)]
            except psutil.Error:
                members[pid] = self.members.get(pid, [])
        self.members, self.refreshed = members, time.monotonic()

    def pids(self) -> set[int]:
        return {p.pid for procs in self.members.values() for p in procs}

    def cpu_seconds(self) -> dict[str, float]:
        if time.monotonic() - self.refreshed > TREE_REFRESH_S:
            self.refresh()
        out = {}
        for pid, procs in self.members.items():
            total = 0.0
            for p in procs:
                try:
                    t = p.cpu_times()
                    seconds = t.user + t.system + t.children_user + t.children_system
                except psutil.Error:
                    # A child that exited moves to its parent's children_* once reaped; an exited rank keeps its
                    # last reading (a series that fell to 0 would read as negative CPU at the window's end).
                    seconds = self.last.get(pid, 0.0) if p.pid == pid else 0.0
                if p.pid == pid:
                    self.last[pid] = seconds
                total += seconds
            out[str(pid)] = total
        if self.parent:
            try:
                t = psutil.Process(self.parent).cpu_times()
                out["parent"] = t.user + t.system
            except psutil.Error:
                pass
        return out


def node_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole node since boot. Busy excludes idle, iowait and steal (time the
    hypervisor gave to other guests: no process of this node used it)."""
    t = psutil.cpu_times()
    # guest time is already counted in user and nice on Linux
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return total - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "steal", 0.0), total


def cpu_freq_mhz() -> float | None:
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError):
        return None
    return freq.current if freq and freq.current else None


class Stop:
    def __init__(self) -> None:
        self.now = False
        signal.signal(signal.SIGTERM, self.set)
        signal.signal(signal.SIGINT, self.set)

    def set(self, *_: object) -> None:
        self.now = True


def sample_loop(
    out: Path, interval_ms: int, pids: list[int], parent: int | None, match: str, max_seconds: float = 0.0
) -> None:
    stop = Stop()
    started = time.monotonic()
    nvml, rapl = Nvml(), Rapl()
    floor = MIN_INTERVAL_MS_NVML if nvml.handles else MIN_INTERVAL_MS_CPU
    interval = max(interval_ms, floor) / 1000
    tree = Tree(pids, parent, match, os.getpid())
    tree.refresh()
    me = psutil.Process()
    freq = cpu_freq_mhz()
    start = {
        "kind": "start",
        "t": time.time(),
        "host": socket.gethostname(),
        "interval_ms": interval * 1000,
        "requested_interval_ms": interval_ms,
        "ncpu": psutil.cpu_count(),
        "run_pids": sorted(tree.pids()),
        "cpu": {
            **cpu_provenance(),
            "freq_available": freq is not None,
            "freq_why_missing": "" if freq is not None else "psutil.cpu_freq() has no reading (a VM?)",
        },
        "rapl": {
            "available": bool(rapl.zones),
            "why_missing": rapl.reason,
            "zones": {k: top for k, (_, top) in rapl.zones.items()},
        },
        "gpu": {
            "available": bool(nvml.handles),
            "why_missing": nvml.reason,
            "devices": nvml.provenance(tree.pids()) if nvml.handles else [],
        },
    }
    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(start) + "\n")
        flushed = time.monotonic()
        next_at = time.monotonic()
        while not stop.now:
            busy, total = node_cpu()
            t = me.cpu_times()
            sample = {
                "kind": "sample",
                "t": time.time(),
                "node_busy_s": busy,
                "node_total_s": total,
                "run_s": tree.cpu_seconds(),
                "sampler_s": t.user + t.system,
                "freq_mhz": cpu_freq_mhz(),
            }
            if rapl.zones:
                sample["rapl_uj"] = rapl.read()
            if nvml.handles:
                sample["gpus"] = nvml.read()
            f.write(json.dumps(sample, separators=(",", ":")) + "\n")
            if time.monotonic() - flushed > 1.0:
                f.flush()
                flushed = time.monotonic()
            if max_seconds and time.monotonic() - started > max_seconds:
                break
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        t = me.cpu_times()
        f.write(
            json.dumps(
                {
                    "kind": "end",
                    "t": time.time(),
                    "sampler_cpu_s": t.user + t.system,
                    "sampler_wall_s": time.monotonic() - started,
                }
            )
            + "\n"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.telemetry.sampler", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON-lines file to write ({host}: this node's name)")
    p.add_argument("--interval-ms", type=int, default=100)
    p.add_argument("--pids", default="", help="the ranks' pids, comma-separated (each with its process tree)")
    p.add_argument("--parent", type=int, default=0, help="the supervisor: its own CPU time counts to the run")
    p.add_argument("--match", default="", help="find the ranks by a string in their command line (under srun)")
    p.add_argument("--max-seconds", type=float, default=0.0, help="stop by itself after this long (0: at SIGTERM)")
    args = p.parse_args(argv)
    pids = [int(x) for x in args.pids.split(",") if x]
    out = Path(args.out.replace("{host}", socket.gethostname()))
    sample_loop(out, args.interval_ms, pids, args.parent or None, args.match, args.max_seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
