"""How long CI's stages and the test tiers take on a fresh clone of this checkout's HEAD.

    .venv/bin/python benchmarks/ci_tiers.py            # setup, quality gate (clean and with a planted error), fast tier
    .venv/bin/python benchmarks/ci_tiers.py --full     # and the full suite (CI's command)
    ... --keep DIR                                     # the tiers' whole pytest output (every test's duration)

Targets (docs/development.md): the quality gate fails within two minutes of a fresh clone (setup included), the
fast tier (`pytest -m "not slow"`) takes <= 5 minutes on 2 cores, the full suite <= 30 minutes. The baseline
of each tier is the full suite where it is measured in the same invocation (`--full`), the fast tier's share of
it as a ratio. The clone gets its own core environment (bootstrap.sh --test, as CI); the framework environments
are this checkout's `.venvs/` (linked: built once per machine, not part of an everyday test run).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import resultfile

REPO = Path(__file__).resolve().parents[1]
PLANTED = "\nimport os  # planted by benchmarks/ci_tiers.py: an unused import the gate must refuse\n"


def timed(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, keep: Path | None = None
) -> tuple[float, int, str]:
    """Wall seconds, exit status and the output's last lines of a command (the whole output into `keep`)."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    if keep:
        keep.write_text(done.stdout + done.stderr)
    output = (done.stdout + done.stderr).strip().splitlines()
    return time.perf_counter() - started, done.returncode, " | ".join(output[-2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="also the full suite (CI's command)")
    parser.add_argument("--keep", type=Path, help="a directory for the tiers' whole pytest output (durations)")
    args = parser.parse_args()
    record = resultfile.Recorder(__file__)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlbench-tiers-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        if (REPO / ".venvs").is_dir():
            (clone / ".venvs").symlink_to(REPO / ".venvs")
        setup, code, tail = timed(["bash", "workflow/scripts/bootstrap.sh", "--test"], clone)
        assert code == 0, tail
        lint, code, tail = timed(["bash", ".ci/lint"], clone)
        assert code == 0, tail
        rows.append(["stage 1: bootstrap.sh --test (fresh .venv)", round(setup), "–", "–"])
        rows.append(["stage 1: .ci/lint, clean", round(lint), "exit 0", "<= 120 s with the setup"])
        stats = clone / "workflow" / "dlbench" / "collect" / "stats.py"
        clean = stats.read_text()
        stats.write_text(clean + PLANTED)
        planted, code, tail = timed(["bash", ".ci/lint"], clone)
        stats.write_text(clean)
        assert code != 0, "the quality gate passed a planted unused import"
        rows.append(["stage 1: .ci/lint, a planted unused import", round(planted), f"exit {code}: {tail}", "fails"])
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        pytest = [str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        keep = args.keep.resolve() if args.keep else None
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
        fast, code, tail = timed([*pytest, "-m", "not slow"], clone, env, keep and keep / "fast.txt")
        rows.append(["fast tier: pytest -m 'not slow'", round(fast), f"exit {code}: {tail}", "<= 300 s"])
        if args.full:
            full, code, tail = timed([*pytest, "--durations=0"], clone, env, keep and keep / "full.txt")
            rows.append(["full suite: pytest (CI's command)", round(full), f"exit {code}: {tail}", "<= 1800 s"])
            rows.append(["fast tier ÷ full suite", round(fast / full, 2), "–", "–"])
    print("\n".join(" | ".join(str(cell) for cell in row) for row in rows))
    record.write(
        [
            resultfile.table(
                "CI's stages and the test tiers on a fresh clone", ["step", "seconds", "result", "target"], rows
            )
        ],
        notes=["pytest runs on pyproject.toml's pytest-xdist workers (three); the framework environments are prebuilt"],
    )


if __name__ == "__main__":
    main()
