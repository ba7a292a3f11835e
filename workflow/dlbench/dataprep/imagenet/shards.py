"""Writing the shards: one task per shard for the worker processes, the DALI index and the optional MXNet
RecordIO beside them, the manifest last (convert)."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from dlbench import layout
from dlbench.dataprep import recordio
from dlbench.dataprep import tfrecord as tfr
from dlbench.dataprep.files import sha256_file, temporary, write_json

from .examples import class_entries, example_head
from .images import BadImage, prepare_image
from .inputs import (
    SPLITS,
    InputError,
    Split,
    read_bounding_boxes,
    read_metadata,
    read_synsets,
    scan_flat,
    scan_folders,
    shuffle,
)

MANIFEST = layout.MANIFEST


@dataclass
class ShardTask:
    split: str
    shard: int
    shards: int
    start: int  # the shard's slice of the split's shuffled items
    stop: int

    @property
    def name(self) -> str:
        return layout.shard_name(self.split, self.shard, self.shards)


# What the workers read (set before the pool forks; a shard task is then just a few integers).
_JOB: dict = {}


def _write_shard(task: ShardTask) -> dict:
    out: Path = _JOB["out"]
    items = _JOB["splits"][task.split].items
    class_bytes: list[bytes] = _JOB["class_bytes"]
    boxes: dict = _JOB["boxes"]
    full_decode: bool = _JOB["full_decode"]
    path = out / task.name
    tmp = temporary(path)
    rec_tmp = temporary(out / layout.RECORDIO_DIR / task.name) if _JOB["recordio"] else None
    counts = [0] * len(class_bytes)
    skipped, reencoded, index = [], [], []
    sha = hashlib.sha256()
    offset = 0
    rec_index: list[tuple[int, int]] = []
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    completed, rec_file = False, None
    try:
        rec_file = open(rec_tmp, "wb") if rec_tmp else None  # noqa: SIM115 - closed below
        rec = recordio.RecordIOWriter(rec_file) if rec_file else None
        for position in range(task.start, task.stop):
            source, cls = items[position]
            try:
                try:
                    with open(source, "rb") as src:
                        data = src.read()
                except OSError as exc:
                    raise BadImage(f"unreadable: {exc.strerror or exc}") from None
                image, height, width, kind = prepare_image(data, full_decode)
            except BadImage as exc:
                skipped.append({"file": source, "split": task.split, "reason": str(exc)})
                continue
            filename = os.path.basename(source)
            if kind:
                reencoded.append({"file": source, "split": task.split, "from": kind})
            head = example_head(len(image), height, width, filename, cls + 1, class_bytes[cls], boxes.get(filename, ()))
            parts = tfr.frame_parts(head, image)  # the record, without joining the image into a new bytes object
            size = len(parts[0]) + len(image) + len(parts[2])
            written = os.writev(fd, parts)
            if written != size:  # a short write (rare for regular files): write the rest
                rest = b"".join(parts)[written:]
                while rest:
                    rest = rest[os.write(fd, rest) :]
            for part in parts:
                sha.update(part)
            index.append((offset, size))
            offset += size
            counts[cls] += 1
            if rec:
                rec.write(position, recordio.pack(float(cls), position, image))
        if rec_file:
            rec_file.close()
        if rec is not None:
            rec_index = rec.index
        os.close(fd)
        fd = -1
        # the index first: a shard under its final name always has its index beside it
        idx = out / layout.dali_index(task.name)
        tfr.write_dali_index(temporary(idx), index)
        os.replace(temporary(idx), idx)
        os.replace(tmp, path)
        completed = True
    finally:
        if fd >= 0:
            os.close(fd)
        if not completed:
            tmp.unlink(missing_ok=True)
            if rec_file:
                rec_file.close()
            if rec_tmp:
                rec_tmp.unlink(missing_ok=True)
    return {
        "split": task.split,
        "shard": task.shard,
        "file": task.name,
        "records": len(index),
        "bytes": offset,
        "sha256": sha.hexdigest(),
        "index": layout.dali_index(task.name),
        "classes": counts,
        "skipped": skipped,
        "reencoded": reencoded,
        "recordio": (str(rec_tmp), rec_index) if rec_tmp else None,
    }


def _shard_tasks(split: Split, shards: int) -> list[ShardTask]:
    n = len(split.items)
    return [ShardTask(split.name, k, shards, k * n // shards, (k + 1) * n // shards) for k in range(shards)]


def _run(tasks: list[ShardTask], workers: int, progress: Callable[[dict], None]) -> list[dict]:
    results = []
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            results.append(_write_shard(task))
            progress(results[-1])
        return results
    # largest shards first so the last ones to finish are small (sizes differ by at most one image)
    ordered = sorted(tasks, key=lambda t: t.start - t.stop)
    with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=get_context("fork")) as pool:
        for result in pool.map(_write_shard, ordered, chunksize=1):
            results.append(result)
            progress(result)
    return results


def _append(path: str, dst: io.BufferedWriter) -> None:
    """Append a file: in-kernel copy (a reflink where the file system can), a Python copy where it cannot."""
    with open(path, "rb") as src:
        dst.flush()
        start = dst.seek(0, os.SEEK_END)
        try:
            remaining = os.fstat(src.fileno()).st_size
            while remaining:
                copied = os.copy_file_range(src.fileno(), dst.fileno(), remaining)
                if not copied:
                    raise OSError(errno.EINVAL, "copy_file_range copied nothing")
                remaining -= copied
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                raise
            dst.truncate(start)
            dst.seek(start)
            src.seek(0)
            shutil.copyfileobj(src, dst, 1 << 20)
        dst.seek(0, os.SEEK_END)


def _join_recordio(out: Path, split: str, results: list[dict]) -> dict:
    """Concatenate the shards' RecordIO parts in shard order into <split>.rec/.idx."""
    rec_name, idx_name = layout.recordio(split)
    rec_path, idx_path = out / rec_name, out / idx_name
    rec_tmp, idx_tmp = temporary(rec_path), temporary(idx_path)
    entries: list[tuple[int, int]] = []
    base = 0
    with open(rec_tmp, "wb") as rec:
        for result in results:
            part, index = result.pop("recordio")
            entries += [(key, base + offset) for key, offset in index]
            _append(part, rec)
            base = rec.tell()
            os.unlink(part)
    idx_tmp.write_text(recordio.index_text(entries))
    os.replace(rec_tmp, rec_path)
    os.replace(idx_tmp, idx_path)
    return {
        "rec": rec_name,
        "idx": idx_name,
        "records": len(entries),
        "bytes": base,
        "sha256": sha256_file(rec_path),
        "idx_sha256": sha256_file(idx_path),
    }


def _input_info(path: Path | None) -> dict | None:
    if path is None:
        return None
    return {"path": str(path), "sha256": sha256_file(path)}


def convert(
    out: Path,
    synsets_file: Path,
    train_dir: Path | None = None,
    validation_dir: Path | None = None,
    validation_labels: Path | None = None,
    metadata: Path | None = None,
    bounding_boxes: Path | None = None,
    train_shards: int = 1024,
    validation_shards: int = 128,
    seed: int = 12345,
    workers: int | None = None,
    with_recordio: bool = False,
    full_decode: bool = False,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> dict:
    """Convert; returns the manifest (also written to out/manifest.json)."""
    start = time.perf_counter()
    if train_dir is None and validation_dir is None:
        raise InputError("nothing to convert: give --train-dir and/or --validation-dir")
    if train_shards < 1 or validation_shards < 1:
        raise InputError("shard counts must be >= 1")
    if max(train_shards, validation_shards) > layout.MAX_SHARDS:
        raise InputError(f"at most {layout.MAX_SHARDS} shards (five-digit shard names)")
    for label, path in (
        ("synsets", synsets_file),
        ("metadata", metadata),
        ("bounding boxes", bounding_boxes),
        ("validation labels", validation_labels),
    ):
        if path is not None and not path.is_file():
            raise InputError(f"{path}: {label} file not found")
    synsets = read_synsets(synsets_file)
    names = read_metadata(metadata) if metadata else {}
    boxes = read_bounding_boxes(bounding_boxes) if bounding_boxes else {}

    splits: dict[str, Split] = {}
    if train_dir is not None:
        splits["train"] = scan_folders(train_dir, synsets, "train")
    if validation_dir is not None:
        splits["validation"] = (
            scan_flat(validation_dir, validation_labels, synsets, "validation")
            if validation_labels
            else scan_folders(validation_dir, synsets, "validation")
        )
    for split in splits.values():
        if not split.items:
            where = train_dir if split.name == "train" else validation_dir
            raise InputError(
                f"{where}: no images (*.JPEG/*.jpg/*.png) in folders named after listed synsets"
                + (
                    ""
                    if split.name == "train" or validation_labels
                    else "; for a flat validation directory pass --validation-labels"
                )
            )
        for ignored in split.ignored:
            log(f"warning: {ignored}: not a listed synset, ignored")
        shuffle(split, seed)
    if metadata:
        used = {synsets[c] for split in splits.values() for _, c in split.items}
        missing = sorted(used - names.keys())
        if missing:
            raise InputError(f"{metadata}: no name for synsets {missing[:10]}{' ...' if len(missing) > 10 else ''}")

    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-rewritten directory must not look complete
    (out / layout.DALI_INDEX_DIR).mkdir(exist_ok=True)
    if with_recordio:
        (out / layout.RECORDIO_DIR).mkdir(exist_ok=True)
    shard_counts = {"train": train_shards, "validation": validation_shards}
    tasks = [t for name, split in splits.items() for t in _shard_tasks(split, shard_counts[name])]
    _JOB.update(
        out=out,
        splits=splits,
        boxes=boxes,
        full_decode=full_decode,
        recordio=with_recordio,
        class_bytes=[class_entries(i + 1, s, names.get(s, "")) for i, s in enumerate(synsets)],
    )
    workers = max(1, workers or len(os.sched_getaffinity(0)))
    done = [0]

    def progress(result: dict) -> None:
        done[0] += 1
        if done[0] == len(tasks) or done[0] % max(1, len(tasks) // 10) == 0:
            log(f"{done[0]}/{len(tasks)} shards written (last: {result['file']}, {result['records']} records)")

    try:
        results = sorted(_run(tasks, workers, progress), key=lambda r: (SPLITS.index(r["split"]), r["shard"]))
    finally:
        _JOB.clear()

    manifest: dict = {
        "format": "imagenet-tfrecord (tensorflow/models build_imagenet_data.py schema)",
        "version": 1,
        "seed": seed,
        "labels": "1..N in sorted synset order, 0 = background; RecordIO labels are 0-based",
        "num_classes": len(synsets),
        "inputs": {
            "train_dir": str(train_dir) if train_dir else None,
            "validation_dir": str(validation_dir) if validation_dir else None,
            "synsets": _input_info(synsets_file),
            "metadata": _input_info(metadata),
            "bounding_boxes": _input_info(bounding_boxes),
            "validation_labels": _input_info(validation_labels),
        },
        "options": {
            "train_shards": train_shards,
            "validation_shards": validation_shards,
            "recordio": with_recordio,
            "full_decode": full_decode,
        },
        "splits": {},
        "skipped": [s for r in results for s in r.pop("skipped")],
        "reencoded": [s for r in results for s in r.pop("reencoded")],
    }
    by_split: dict[str, list[dict]] = {name: [] for name in splits}
    for r in results:
        by_split[r.pop("split")].append(r)
    for name, split in splits.items():
        own = by_split[name]
        totals = [sum(column) for column in zip(*(r["classes"] for r in own), strict=True)]
        for r in own:
            r["classes"] = {synsets[i]: n for i, n in enumerate(r["classes"]) if n}
        manifest["splits"][name] = {
            "images_found": len(split.items),
            "records": sum(r["records"] for r in own),
            "bytes": sum(r["bytes"] for r in own),
            "shards": [{k: v for k, v in r.items() if k != "recordio"} for r in own],
            "classes": {synsets[i]: n for i, n in enumerate(totals) if n},
            "ignored_directories": split.ignored,
            "recordio": _join_recordio(out, name, own) if with_recordio else None,
        }
    manifest["totals"] = {
        k: sum(s[k] for s in manifest["splits"].values()) for k in ("images_found", "records", "bytes")
    } | {"skipped": len(manifest["skipped"]), "reencoded": len(manifest["reencoded"])}
    manifest["classes"] = [{"label": i + 1, "synset": s, "text": names.get(s, "")} for i, s in enumerate(synsets)]
    write_json(out / MANIFEST, manifest)
    _remove_stale(out, manifest, log)
    elapsed = time.perf_counter() - start

    for item in manifest["skipped"]:
        log(f"skipped {item['file']}: {item['reason']}")
    records = manifest["totals"]["records"]
    log(
        f"{records} records in {len(results)} shards, {manifest['totals']['bytes'] / 1e6:.1f} MB, "
        f"{len(manifest['reencoded'])} re-encoded, {len(manifest['skipped'])} skipped: {elapsed:.2f} s "
        f"({records / max(elapsed, 1e-9):.0f} images/s, {workers} workers)"
    )
    return manifest


def _remove_stale(out: Path, manifest: dict, log: Callable[[str], None]) -> None:
    """Outputs of an earlier run into the same directory (other shard counts would match `train-*` too)."""
    current = {s["file"] for split in manifest["splits"].values() for s in split["shards"]}
    stale = [p for p in layout.shard_files(out, SPLITS) if p.name not in current]
    stale += [
        p
        for p in layout.shard_files(out / layout.DALI_INDEX_DIR, SPLITS, ".idx")
        if p.name.removesuffix(".idx") not in current
    ]
    rec = {
        f
        for split in manifest["splits"].values()
        if split["recordio"]
        for f in (split["recordio"]["rec"], split["recordio"]["idx"])
    }
    stale += [out / f for split in SPLITS for f in layout.recordio(split) if (out / f).exists() and f not in rec]
    for path in stale:
        log(f"removing {path} (not part of this run)")
        path.unlink()
