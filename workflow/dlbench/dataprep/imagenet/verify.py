"""Checking a converted directory against its manifest: every shard's records, keys, counts and checksums
(verify)."""

from __future__ import annotations

import json
import os
import struct
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from dlbench import layout
from dlbench.dataprep import recordio
from dlbench.dataprep import tfrecord as tfr
from dlbench.dataprep.files import check_file, sha256_file

from .inputs import SPLITS
from .shards import MANIFEST

REQUIRED_KEYS = (
    "image/encoded",
    "image/height",
    "image/width",
    "image/colorspace",
    "image/channels",
    "image/format",
    "image/filename",
    "image/class/label",
    "image/class/synset",
    "image/class/text",
    "image/object/bbox/xmin",
    "image/object/bbox/xmax",
    "image/object/bbox/ymin",
    "image/object/bbox/ymax",
    "image/object/bbox/label",
)


def _verify_shard(job: tuple[Path, dict, list[str]]) -> list[str]:
    out, shard, synsets = job
    path = out / shard["file"]
    errors: list[str] = []
    if not path.is_file():
        return [f"{path}: missing"]
    counts: dict[str, int] = {}
    index = []
    try:
        for number, (offset, data) in enumerate(tfr.read_records(path)):
            index.append((offset, len(data) + tfr.OVERHEAD))
            try:
                ex = tfr.parse_example(data)
                missing = [k for k in REQUIRED_KEYS if k not in ex]
                if missing:
                    raise ValueError(f"missing features {missing}")
                label, synset = ex["image/class/label"][0], ex["image/class/synset"][0].decode()
                if not 1 <= label <= len(synsets) or synsets[label - 1] != synset:
                    raise ValueError(f"label {label} does not match synset {synset}")
                if len(ex["image/object/bbox/xmin"]) != len(ex["image/object/bbox/label"]):
                    raise ValueError("bounding-box lists of different lengths")
                if ex["image/encoded"][0][:2] != b"\xff\xd8":
                    raise ValueError("image/encoded is not JPEG data")
            except (ValueError, IndexError, KeyError, UnicodeDecodeError) as exc:
                errors.append(f"{path}: record {number} (byte offset {offset}): bad Example: {exc!r}")
                continue
            counts[synset] = counts.get(synset, 0) + 1
    except tfr.CorruptRecord as exc:
        return [str(exc)]
    if len(index) != shard["records"]:
        errors.append(f"{path}: {len(index)} records, manifest says {shard['records']}")
    if counts != shard["classes"]:
        errors.append(f"{path}: per-class counts differ from the manifest")
    errors += check_file(path, shard)
    idx = out / shard["index"]
    try:
        lines = idx.read_text().splitlines()
    except OSError as exc:
        return errors + [f"{idx}: cannot read: {exc}"]
    expected = tfr.dali_index_text(index).splitlines()
    for number, line in enumerate(lines):
        if number >= len(expected) or line != expected[number]:
            errors.append(
                f"{idx}: line {number + 1}: {line!r} does not match record {number} of {path} "
                f"({'no such record' if number >= len(expected) else expected[number]})"
            )
            break
    if len(lines) < len(index):
        errors.append(f"{idx}: {len(lines)} entries for {len(index)} records")
    return errors


def _verify_recordio(out: Path, info: dict, split: dict, synsets: list[str]) -> list[str]:
    rec, idx = out / info["rec"], out / info["idx"]
    try:
        entries = recordio.read_index(idx)
        count = 0
        positions = dict((o, k) for k, o in entries)
        for offset, payload in recordio.read_records(rec):
            label, record_id, _, data = recordio.unpack(payload)
            if positions.get(offset) != record_id:
                raise recordio.CorruptRecordIO(f"{idx}: no entry '{record_id}\\t{offset}' for record {count}")
            if not 0 <= label < len(synsets) or data[:2] != b"\xff\xd8":
                raise recordio.CorruptRecordIO(f"{rec}: record {count} (byte offset {offset}): bad label or image")
            count += 1
    except (OSError, ValueError, struct.error) as exc:
        return [f"{exc}"]
    errors = []
    if count != info["records"] or count != split["records"] or len(entries) != count:
        errors.append(f"{rec}: {count} records ({len(entries)} in {idx}), manifest says {info['records']}")
    if sha256_file(rec) != info["sha256"] or sha256_file(idx) != info["idx_sha256"]:
        errors.append(f"{rec}: sha256 of the .rec or .idx differs from the manifest")
    return errors


def verify(out: Path, workers: int | None = None) -> list[str]:
    """Every record of every shard (length, CRCs, parse), the DALI indexes, and the manifest's counts, bytes
    and sha256; a list of errors (empty = good)."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        return _verify(out, manifest, workers)
    except (OSError, ValueError) as exc:
        return [f"{out / MANIFEST}: unreadable manifest: {exc}"]
    except (KeyError, TypeError, AttributeError) as exc:
        return [f"{out / MANIFEST}: malformed manifest ({exc!r})"]


def _verify(out: Path, manifest: dict, workers: int | None) -> list[str]:
    synsets = [c["synset"] for c in manifest["classes"]]
    splits = manifest["splits"]
    jobs = [(out, shard, synsets) for split in splits.values() for shard in split["shards"]]
    workers = max(1, min(workers or len(os.sched_getaffinity(0)), len(jobs)))
    if workers == 1:
        errors = [e for job in jobs for e in _verify_shard(job)]
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            errors = [e for found in pool.map(_verify_shard, jobs) for e in found]
    listed = {shard["file"] for split in splits.values() for shard in split["shards"]}
    for path in layout.shard_files(out, SPLITS):
        if path.name not in listed:
            errors.append(f"{path}: a shard file not in the manifest")
    for name, split in splits.items():
        shards = split["shards"]
        if sum(s["records"] for s in shards) != split["records"]:
            errors.append(f"{out / MANIFEST}: {name} records do not add up")
        for shard in shards:
            parsed = layout.parse_shard_name(shard["file"])
            if not parsed or parsed[0] != name or parsed[2] != len(shards):
                errors.append(
                    f"{out / MANIFEST}: shard name {shard['file']!r} does not fit {len(shards)} {name} shards"
                )
        if split.get("recordio"):
            errors += _verify_recordio(out, split["recordio"], split, synsets)
    return errors
