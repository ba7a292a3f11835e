"""A sweep over nodes (the study's `sweep:`): which nodes, in which groups, and which of them can take a job now.

The nodes come from the study (host names and SLURM hostlist expressions, expanded here as `scontrol show
hostnames` does) or from a partition (`sinfo`, read when the study is planned). A configuration of N nodes runs
on consecutive groups of N of them, each group a value of the `node` axis (its names joined by '+'). A node that
SLURM reports down, drained, failed or in maintenance when the study is planned gets no job (SLURM would hold a
job pinned to it forever); it is recorded with its state and reason in `results/sweep/nodes.json`
(identity.SWEEP_NODES), which the aggregate reads, so the report names it instead of losing it.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from typing import Any

from ..vocabulary.axes import NODE_GROUP
from .config_errors import ConfigError

# SLURM's long state names (sinfo %T) of a node that takes no new job; a trailing '*' (not responding) too.
UNAVAILABLE = ("down", "drain", "fail", "maint", "inval", "unknown", "future", "power", "reboot")
SINFO_TIMEOUT_S = 20  # a controller answers in well under a second
HOSTLIST_PART = re.compile(r"([^\[\],]*)(?:\[([^\]]*)\])?")


def expand_hostlist(expression: str) -> list[str]:
    """`gpu[001-003,7],login1` -> gpu001, gpu002, gpu003, gpu7, login1 (SLURM's hostlist syntax: comma-separated
    names, each with bracketed lists of numbers and ranges, zero padding kept; several brackets multiply)."""
    names: list[str] = []
    for name in _split_top(expression):
        pieces: list[list[str]] = []
        for prefix, ranges in HOSTLIST_PART.findall(name):
            if not prefix and not ranges:
                continue
            pieces.append([prefix])
            if ranges:
                pieces.append(_numbers(ranges, expression))
        names += ["".join(parts) for parts in itertools.product(*pieces)]
    return names


def _split_top(expression: str) -> list[str]:
    """The comma-separated names of an expression, commas inside brackets kept."""
    parts, depth, current = [], 0, ""
    for char in expression:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ConfigError(f"sweep.nodes: {expression!r}: brackets do not nest in a hostlist")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ConfigError(f"sweep.nodes: {expression!r}: a '[' is not closed")
    return [part for part in [*parts, current] if part]


def _numbers(ranges: str, expression: str) -> list[str]:
    out = []
    for item in ranges.split(","):
        low, sep, high = item.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ConfigError(f"sweep.nodes: {expression!r}: [{ranges}] is not a list of numbers and ranges (1-4,7)")
        if sep and int(high) < int(low):
            raise ConfigError(f"sweep.nodes: {expression!r}: the range {item} runs backwards")
        width = len(low) if low.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(low), int(high if sep else low) + 1)]
    return out


def sweep_nodes(sweep: dict[str, Any]) -> list[str]:
    """The study's nodes in order, each once: its `nodes` expanded, or every node of its `partition` (sinfo)."""
    if "nodes" in sweep and "partition" in sweep:
        raise ConfigError("sweep: nodes and partition both given; name the nodes or the partition, not both")
    if "partition" in sweep:
        names = partition_nodes(sweep["partition"])
    else:
        names = [name for expression in sweep.get("nodes", []) for name in expand_hostlist(expression)]
    names = list(dict.fromkeys(names))
    if bad := [name for name in names if "_" in name or NODE_GROUP in name]:
        raise ConfigError(
            f"sweep.nodes: {', '.join(bad[:3])}: a node name with '_' or '+' cannot be part of a run's identity "
            "(its variant spells '-' as '_' and joins a group's nodes with '+')"
        )
    return names


def groups(nodes: list[str], size: int) -> tuple[list[str], list[str]]:
    """Consecutive groups of `size` nodes, each joined by '+', and the nodes left over."""
    whole = len(nodes) - len(nodes) % size
    return [NODE_GROUP.join(nodes[i : i + size]) for i in range(0, whole, size)], nodes[whole:]


def members(node: str) -> list[str]:
    """The nodes of a `node` axis value (one, or a group's)."""
    return node.split(NODE_GROUP)


def _sinfo(*args: str) -> str:
    if shutil.which("sinfo") is None:
        raise ConfigError("sweep: sinfo is not on PATH here: a sweep over nodes needs SLURM's commands (docs/nodes.md)")
    try:
        result = subprocess.run(["sinfo", *args], capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"sweep: sinfo {' '.join(args)} did not answer in {SINFO_TIMEOUT_S} s") from None
    if result.returncode:
        raise ConfigError(f"sweep: sinfo {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def partition_nodes(partition: str) -> list[str]:
    names = [line.strip() for line in _sinfo("-h", "-N", "-p", partition, "-o", "%N").splitlines() if line.strip()]
    if not names:
        raise ConfigError(f"sweep.partition: {partition}: SLURM lists no node in it (sinfo -p {partition})")
    return names


def node_states(nodes: list[str]) -> dict[str, dict[str, str]]:
    """Each node's SLURM state and reason (sinfo), `available` 'yes' or 'no'; a node SLURM does not know: 'no'.
    ConfigError where sinfo cannot answer, or knows none of the nodes."""
    listing = _sinfo("-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T|%E")
    states: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        name, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if name in states:  # one line per partition the node is in: the same state
            continue
        down = state.endswith("*") or state.lower().startswith(UNAVAILABLE)
        reason = "" if reason == "none" else reason
        states[name] = {"state": state, "reason": reason, "available": "no" if down else "yes"}
    if not states:  # a misspelt list, or a SLURM of another cluster: no node to sweep, not a fleet of down ones
        shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        raise ConfigError(
            f"sweep.nodes: SLURM here knows none of the sweep's nodes ({shown}); `sinfo -N` lists the nodes it knows"
        )
    for name in nodes:
        states.setdefault(name, {"state": "unknown to SLURM", "reason": "not in sinfo", "available": "no"})
    return states
