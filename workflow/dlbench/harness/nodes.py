"""The nodes of a multi-node SLURM run, and noticing when one is lost (standard library only).

A node that dies mid-run (power, kernel panic, its slurmd killed) takes its ranks with it. The ranks on the
surviving nodes then either fail at once (a peer's connection reset: Gloo, ps-lite) or hang in their next
collective until a framework time-out of many minutes; SLURM itself only marks the node DOWN and ends the job
(NODE_FAIL) after SlurmdTimeout (300 s by default), and would then requeue it. So the supervisor, which runs on
the allocation's first node, watches the other nodes itself: every PROBE_INTERVAL_S it opens a TCP connection to
each node's slurmd. A refused connection (the host is up, its slurmd is gone) counts as lost at once; no answer
within PROBE_TIMEOUT_S (the host is gone) counts as lost after MISSES_TO_LOSE probes in a row. A busy node still
accepts connections (the kernel completes the handshake), so load does not look like loss.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field

PROBE_INTERVAL_S = 2.0
PROBE_TIMEOUT_S = 2.0
MISSES_TO_LOSE = 3
DEFAULT_SLURMD_PORT = 6818


@dataclass
class Node:
    name: str
    address: str
    port: int
    misses: int = 0


@dataclass
class LostNode:
    node: str
    why: str  # what the probe saw
    state: str  # SLURM's state of the node when the loss was noticed (it may not have noticed yet)
    reason: str  # SLURM's reason for that state, if any

    def describe(self) -> str:
        reason = f", reason: {self.reason}" if self.reason else ""
        return f"node {self.node} lost ({self.why}; SLURM node state {self.state}{reason})"


def _scontrol(*args: str) -> str:
    try:
        out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def _fields(line: str) -> dict[str, str]:
    """`scontrol -o` output: key=value words (values with spaces, such as Reason, are cut at the first)."""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def slurmd_port() -> int:
    for line in _scontrol("show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmdPort" and value.strip().isdigit():
            return int(value.strip())
    return DEFAULT_SLURMD_PORT


def allocation_nodes(nodelist: str) -> list[Node]:
    """The allocation's nodes with the address and port their slurmd listens on (NodeAddr, SlurmdPort)."""
    port = slurmd_port()
    nodes = []
    for line in _scontrol("-o", "show", "node", nodelist).splitlines():
        fields = _fields(line)
        if "NodeName" in fields:
            nodes.append(Node(fields["NodeName"], fields.get("NodeAddr") or fields["NodeName"], port))
    return nodes


def node_state(name: str) -> tuple[str, str]:
    """(State, Reason) of a node as slurmctld sees it now, e.g. ('ALLOCATED+NOT_RESPONDING', '')."""
    out = _scontrol("-o", "show", "node", name)
    fields = _fields(out)
    reason = out.split("Reason=", 1)[1].split(" [", 1)[0].strip() if "Reason=" in out else ""
    return fields.get("State", "unknown (scontrol did not answer)"), "" if reason == "(null)" else reason


def probe(node: Node) -> str | None:
    """None if the node's slurmd accepts a connection; else what happened."""
    try:
        with socket.create_connection((node.address, node.port), timeout=PROBE_TIMEOUT_S):
            return None
    except ConnectionRefusedError:
        return f"its slurmd at {node.address}:{node.port} refused the connection"
    except OSError as exc:  # timeout, no route to host
        return f"its slurmd at {node.address}:{node.port} did not answer ({exc.__class__.__name__})"


@dataclass
class NodeWatch:
    """Probes the other nodes of the allocation; `check()` is cheap to call often."""

    nodes: list[Node]
    lost: list[LostNode] = field(default_factory=list)
    next_probe: float = 0.0

    @classmethod
    def for_allocation(cls, nodelist: str, me: str) -> NodeWatch:
        return cls([n for n in allocation_nodes(nodelist) if n.name != me])

    def check(self) -> list[LostNode]:
        """The nodes lost so far (probing those not yet lost once per PROBE_INTERVAL_S)."""
        now = time.monotonic()
        if now < self.next_probe or not self.nodes:
            return self.lost
        self.next_probe = now + PROBE_INTERVAL_S
        for node in self.nodes:
            if any(lost.node == node.name for lost in self.lost):
                continue
            why = probe(node)
            node.misses = 0 if why is None else node.misses + 1
            if why is not None and ("refused" in why or node.misses >= MISSES_TO_LOSE):
                self.lost.append(LostNode(node.name, why, *node_state(node.name)))
        return self.lost
