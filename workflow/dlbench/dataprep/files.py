"""Small file helpers the converters and their `verify` steps share (standard library only).

Outputs are written under a temporary name beside their final one and renamed when complete, so that a file
under its final name is always whole; temporary names are hidden (`.name.tmp`), so that no glob of the
dataset's files (`train-*`) ever matches one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def temporary(path: Path) -> Path:
    """Where `path` is written before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp")


def write_json(path: Path, data: dict) -> None:
    """`data` as indented JSON, written whole or not at all."""
    tmp = temporary(path)
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_file(path: Path, entry: dict) -> list[str]:
    """A file against its manifest entry's `bytes` and `sha256`: the differences (none = good)."""
    size = path.stat().st_size
    if size != entry["bytes"]:
        return [f"{path}: {size} bytes, the manifest says {entry['bytes']}"]
    if sha256_file(path) != entry["sha256"]:
        return [f"{path}: sha256 differs from the manifest's"]
    return []
