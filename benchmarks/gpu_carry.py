"""What a command on a lent GPU machine carries: the repository's files and a wheelhouse, against the budget.

    python benchmarks/gpu_carry.py WHEELHOUSE

A command there carries the repository's files (tracked, and untracked ones git does not ignore) plus the paths it
names, 64 MiB in all; dlbench's check keeps 8 MiB of that free (CARRY_BUDGET_MIB) for a second wheel or a larger
repository. Exit status 1 over the budget. Standard library only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CARRY_BUDGET_MIB = 56.0
LEFT_BEHIND = {".git", ".venv", ".venvs", ".snakemake", "results", "logs"}  # never carried


def repository_bytes(repo: Path = REPO) -> int:
    """The size of the files a command carries: git's tracked and untracked-not-ignored ones, else every file
    outside LEFT_BEHIND."""
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
    )
    if listing.returncode == 0:
        files = [repo / name for name in listing.stdout.split("\0") if name]
    else:
        files = [path for path in repo.rglob("*") if not LEFT_BEHIND & set(path.relative_to(repo).parts)]
    return sum(path.stat().st_size for path in files if path.is_file() and not path.is_symlink())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit(__doc__)
    house = Path(argv[0])
    wheels = sorted(house.glob("*.whl"), key=lambda wheel: -wheel.stat().st_size)
    if not wheels:
        sys.exit(f"gpu_carry: {house} holds no wheel")
    repository = repository_bytes() / 2**20
    wheelhouse = sum(wheel.stat().st_size for wheel in wheels) / 2**20
    total = repository + wheelhouse
    largest = ", ".join(f"{wheel.name.split('-')[0]} {wheel.stat().st_size / 2**20:.1f}" for wheel in wheels[:5])
    print(
        f"carried: repository {repository:.1f} MiB + wheelhouse {wheelhouse:.1f} MiB ({len(wheels)} wheels; largest: "
        f"{largest}) = {total:.1f} MiB, {'within' if total <= CARRY_BUDGET_MIB else 'OVER'} the "
        f"{CARRY_BUDGET_MIB:.0f} MiB budget"
    )
    return 0 if total <= CARRY_BUDGET_MIB else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
