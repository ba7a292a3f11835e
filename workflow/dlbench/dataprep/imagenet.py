"""ImageNet raw tree -> TFRecord shards in the schema of tensorflow/models `build_imagenet_data.py`.

    python -m dlbench.dataprep.imagenet convert --train-dir T --validation-dir V --synsets FILE --out DIR ...
    python -m dlbench.dataprep.imagenet verify DIR

Input: `train/<wnid>/*.JPEG`; validation either in per-synset folders or flat with `--validation-labels`
(one wnid per line in file-name order, as ILSVRC's ground truth, or `<file>[,| |\\t]<wnid>...` lines such as
LOC_val_solution.csv); the synset list (labels 1..N in sorted-synset order, 0 = background); optional
metadata (`<wnid>\\t<name>` -> image/class/text) and bounding boxes (`<file>,<xmin>,<ymin>,<xmax>,<ymax>`,
normalised, several lines per file allowed).

Output in DIR:
    train-00000-of-01024 ...  validation-00000-of-00128 ...   (no extension: `train-*` matches only shards)
    dali_index/<shard>.idx      DALI tfrecord2idx lines `<offset> <record bytes>`
    manifest.json               per shard records / per-class counts / bytes / sha256, totals, inputs, seed,
                                re-encoded and skipped images (with the reason)
    recordio/{train,validation}.{rec,idx}   with --recordio: MXNet RecordIO, 0-based labels, id = position
                                in the shuffled list (so ids have gaps where images were skipped)

Records hold the reference's keys. JPEG bytes are copied exactly (grayscale ones too, as the reference does);
the image size comes from the JPEG frame header (read here; Pillow's lazy open for anything unusual), not a
decode. Files that are not JPEG (the
PNG named .JPEG in real ImageNet) and CMYK JPEGs (22 in real ImageNet) are re-encoded as RGB JPEG at
quality 100, as the reference's coder does -- found by their content, not a list of names. An unreadable,
empty, non-image or truncated file (a JPEG without its end-of-image marker that Pillow cannot decode) is
skipped and listed in the manifest; the run goes on.

Order: each split's file list (synsets sorted, files sorted) shuffled with random.Random(seed) -- the
reference's `random.seed(12345); random.shuffle(...)` for the default seed -- then cut into equal contiguous
shards. A shard is one task for the worker processes, so outputs do not depend on --workers. Shards are
written under a temporary name and renamed when complete; the manifest is written last.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import io
import json
import os
import random
import re
import shutil
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from dlbench import layout
from dlbench.dataprep import recordio
from dlbench.dataprep import tfrecord as tfr
from dlbench.dataprep.files import check_file, sha256_file, temporary, write_json

SPLITS = layout.IMAGENET_SPLITS
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
MANIFEST = layout.MANIFEST
_EOI_WINDOW = 1024  # an end-of-image marker this close to the end means "not truncated"


class InputError(Exception):
    """Bad input that stops the whole run (a missing directory, a malformed list); names the file."""


class BadImage(Exception):
    """One image that cannot go into the records (skipped and listed)."""


# ----------------------------------------------------------------------------- inputs
@dataclass
class Split:
    name: str
    items: list[tuple[str, int]] = field(default_factory=list)  # (path, class index 0..N-1), shuffled
    ignored: list[str] = field(default_factory=list)  # directories not in the synset list


def read_synsets(path: Path) -> list[str]:
    synsets = []
    for number, line in enumerate(_lines(path), 1):
        wnid = line.strip()
        if not wnid:
            continue
        if len(wnid.split()) != 1:
            raise InputError(f"{path}: line {number}: expected one synset id per line, got {line!r}")
        synsets.append(wnid)
    if not synsets:
        raise InputError(f"{path}: no synsets")
    if len(set(synsets)) != len(synsets):
        dupes = sorted({s for s in synsets if synsets.count(s) > 1})
        raise InputError(f"{path}: duplicate synsets {dupes[:5]}")
    return sorted(synsets)


def read_metadata(path: Path) -> dict[str, str]:
    names = {}
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        wnid, sep, name = line.rstrip("\r\n").partition("\t")
        if not sep or not wnid:
            raise InputError(f"{path}: line {number}: expected '<synset>\\t<name>', got {line.strip()!r}")
        names[wnid] = name.strip()
    return names


def read_bounding_boxes(path: Path) -> dict[str, list[tuple[float, float, float, float]]]:
    boxes: dict[str, list[tuple[float, float, float, float]]] = {}
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        parts = line.strip().split(",")
        try:
            if len(parts) != 5:
                raise ValueError
            xmin, ymin, xmax, ymax = map(float, parts[1:])
        except ValueError:
            raise InputError(
                f"{path}: line {number}: expected '<file>,<xmin>,<ymin>,<xmax>,<ymax>', got {line.strip()!r}"
            ) from None
        boxes.setdefault(parts[0].strip(), []).append((xmin, ymin, xmax, ymax))
    return boxes


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def _images_in(directory: Path) -> list[str]:
    """Sorted names of the image files in a directory."""
    # scandir's entry types come with the listing: no stat per file (1.28 M of them on a network file system)
    with os.scandir(directory) as entries:
        return sorted(
            e.name
            for e in entries
            if not e.name.startswith(".") and not e.is_dir() and os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES
        )


def scan_folders(directory: Path, synsets: list[str], name: str) -> Split:
    """`<directory>/<wnid>/*.JPEG` for every listed synset (unlisted folders ignored, as the reference does)."""
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    index = {s: i for i, s in enumerate(synsets)}
    split = Split(name)
    try:
        entries = sorted(directory.iterdir())
        for entry in entries:
            if entry.is_dir():
                if entry.name in index:
                    folder, label = str(entry), index[entry.name]
                    split.items += [(os.path.join(folder, f), label) for f in _images_in(entry)]
                else:
                    split.ignored.append(str(entry))
    except OSError as exc:
        raise InputError(f"{directory}: cannot list: {exc}") from None
    return split


def scan_flat(directory: Path, labels: Path, synsets: list[str], name: str) -> Split:
    """Images directly in `directory`, labelled by `labels`: one wnid per line in file-name order, or
    `<file>[,| |\\t]<wnid>...` lines (a header line without a synset is allowed)."""
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    index = {s: i for i, s in enumerate(synsets)}
    files = [directory / f for f in _images_in(directory)]
    lines = [line for line in _lines(labels) if line.strip()]
    by_name: dict[str, str] = {}
    if lines and all(len(line.split()) == 1 and "," not in line for line in lines):  # ILSVRC ground truth
        if len(lines) != len(files):
            raise InputError(
                f"{labels}: {len(lines)} labels for {len(files)} images in {directory} "
                "(one synset per line, in file-name order)"
            )
        by_name = {p.name: line.strip() for p, line in zip(files, lines, strict=True)}
    else:
        for number, line in enumerate(lines, 1):
            parts = re.split(r"[,\s]+", line.strip())
            if len(parts) < 2 or parts[1] not in index:
                if number == 1 and (len(parts) < 2 or not re.fullmatch(r"n\d{8}", parts[1])):
                    continue  # a CSV header such as LOC_val_solution.csv's
                raise InputError(
                    f"{labels}: line {number}: expected '<file> <synset>' with a listed synset, got {line.strip()!r}"
                )
            by_name[parts[0]] = parts[1]
            by_name.setdefault(Path(parts[0]).stem, parts[1])
    split = Split(name)
    for p in files:
        wnid = by_name.get(p.name) or by_name.get(p.stem)
        if wnid is None:
            raise InputError(f"{labels}: no label for {p.name}")
        if wnid not in index:
            raise InputError(f"{labels}: {p.name} has synset {wnid!r}, which is not in the synset list")
        split.items.append((str(p), index[wnid]))
    return split


def shuffle(split: Split, seed: int) -> None:
    """The reference's order: random.seed(seed); random.shuffle(list(range(n)))."""
    order = list(range(len(split.items)))
    random.Random(seed).shuffle(order)
    split.items = [split.items[i] for i in order]


# ----------------------------------------------------------------------------- Example encoding
# The Example is encoded from precomputed pieces (the codec's scalar half): the generic encoder (tfrecord.example)
# costs ~200 us a record, as much as reading and writing the image. Field order is the reference's, image last.
_CONSTANT = (
    tfr.entry("image/colorspace", tfr.bytes_feature([b"RGB"]))
    + tfr.entry("image/channels", tfr.int64_feature([3]))
    + tfr.entry("image/format", tfr.bytes_feature([b"JPEG"]))
)
_BOX_KEYS = ("image/object/bbox/xmin", "image/object/bbox/xmax", "image/object/bbox/ymin", "image/object/bbox/ymax")
_NO_BOXES = b"".join(tfr.entry(k, tfr.float_feature([])) for k in _BOX_KEYS) + tfr.entry(
    "image/object/bbox/label", tfr.int64_feature([])
)
_SIZES: dict[int, tuple[bytes, bytes]] = {}


def _size_entries(height: int, width: int) -> bytes:
    for value in (height, width):
        if value not in _SIZES:
            _SIZES[value] = (
                tfr.entry("image/height", tfr.int64_feature([value])),
                tfr.entry("image/width", tfr.int64_feature([value])),
            )
    return _SIZES[height][0] + _SIZES[width][1]


def _box_entries(label: int, boxes: Sequence[tuple[float, float, float, float]]) -> bytes:
    if not boxes:
        return _NO_BOXES
    xmin, ymin, xmax, ymax = zip(*boxes, strict=True)
    return b"".join(
        (
            *(tfr.entry(k, tfr.float_feature(v)) for k, v in zip(_BOX_KEYS, (xmin, xmax, ymin, ymax), strict=True)),
            tfr.entry("image/object/bbox/label", tfr.int64_feature([label] * len(boxes))),
        )
    )


def class_entries(label: int, synset: str, text: str) -> bytes:
    return (
        tfr.entry("image/class/label", tfr.int64_feature([label]))
        + tfr.entry("image/class/synset", tfr.bytes_feature([synset.encode()]))
        + tfr.entry("image/class/text", tfr.bytes_feature([text.encode()]))
    )


def example_head(
    image_size: int,
    height: int,
    width: int,
    filename: str,
    label: int,
    class_bytes: bytes,
    boxes: Sequence[tuple[float, float, float, float]],
) -> bytes:
    """All of a serialised tf.train.Example with build_imagenet_data.py's features except the image bytes,
    which follow it (so the image is never copied). `class_bytes` = class_entries(label, synset, text)."""
    features = b"".join(
        (
            _size_entries(height, width),
            _CONSTANT,
            class_bytes,
            _box_entries(label, boxes),
            tfr.entry("image/filename", tfr.bytes_feature([filename.encode()])),
            tfr.entry_head("image/encoded", tfr.BYTES_LIST, image_size),
        )
    )
    return tfr.field_head(1, len(features) + image_size) + features


def encode_example(
    image: bytes,
    height: int,
    width: int,
    filename: str,
    label: int,
    class_bytes: bytes,
    boxes: Sequence[tuple[float, float, float, float]],
) -> bytes:
    """The whole serialised Example (tests, tools); the converter writes example_head + image."""
    return example_head(len(image), height, width, filename, label, class_bytes, boxes) + image


# ----------------------------------------------------------------------------- images
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_header(data: bytes) -> tuple[int, int, int, int] | None:
    """(precision, height, width, components) from the first SOF segment, or None where the markers before it
    do not read plainly (Pillow then decides). A few microseconds, against ~100 for Pillow's lazy open."""
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
        elif marker in _SOF:
            if pos + 10 > end:
                return None
            return data[pos + 4], data[pos + 5] << 8 | data[pos + 6], data[pos + 7] << 8 | data[pos + 8], data[pos + 9]
        elif marker in (0xD8, 0xD9, 0xDA):  # image data before a frame header
            return None
        else:
            pos += 2 + (data[pos + 2] << 8 | data[pos + 3])
    return None


def prepare_image(data: bytes, full_decode: bool = False) -> tuple[bytes, int, int, str | None]:
    """(JPEG bytes, height, width, what was re-encoded or None when the bytes are the file's own).

    Raises BadImage for what cannot be used."""
    if not data:
        raise BadImage("empty file")
    if data[:3] == b"\xff\xd8\xff":
        header = jpeg_header(data)
        # no end-of-image marker near the end: only a full decode can tell whether the data is whole
        decode = full_decode or data.rfind(b"\xff\xd9", -_EOI_WINDOW) == -1
        if decode or header is None or header[0] != 8 or header[3] not in (1, 3) or not header[1] or not header[2]:
            return _pillow_jpeg(data, decode)  # CMYK, 12-bit, odd markers, or to be decoded
        return data, header[1], header[2], None
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
    except Exception:
        raise BadImage(f"not an image (starts with {data[:8].hex(' ')})") from None
    return _reencode(image, (image.format or "unknown").lower())


def _pillow_jpeg(data: bytes, decode: bool) -> tuple[bytes, int, int, str | None]:
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data), formats=("JPEG",))
        width, height = image.size
    except Exception as exc:  # Pillow raises several types for bad headers
        raise BadImage(f"corrupt or truncated JPEG header: {exc}") from None
    if image.mode == "CMYK":
        return _reencode(image, "cmyk")
    if image.mode not in ("RGB", "L"):
        return _reencode(image, f"jpeg-{image.mode}")
    if decode:
        try:
            image.load()
        except Exception as exc:
            raise BadImage(f"truncated or corrupt JPEG data: {exc}") from None
    return data, height, width, None


def _reencode(image, kind: str) -> tuple[bytes, int, int, str]:
    """RGB JPEG at quality 100 (the reference's coder: decode to 3 channels, alpha dropped, encode)."""
    from PIL import Image

    try:
        image.load()
        if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):  # 16-bit PNG: scale as TF's decode_png does
            import numpy as np

            array = np.asarray(image, dtype=np.float64)
            image = Image.fromarray(np.clip(np.rint(array / 257), 0, 255).astype(np.uint8), "L")
        rgb = image.convert("RGB")
        out = io.BytesIO()
        rgb.save(out, "JPEG", quality=100)
    except Exception as exc:
        raise BadImage(f"corrupt {kind.upper()} image: {exc}") from None
    return out.getvalue(), rgb.height, rgb.width, kind


# ----------------------------------------------------------------------------- writing shards
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


# ----------------------------------------------------------------------------- verify
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


# ----------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlbench.dataprep.imagenet",
        description="ImageNet -> TFRecord shards (build_imagenet_data.py schema).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="convert a raw ImageNet tree")
    c.add_argument("--train-dir", type=Path, help="train/<wnid>/*.JPEG")
    c.add_argument("--validation-dir", type=Path, help="validation/<wnid>/*.JPEG, or flat with --validation-labels")
    c.add_argument(
        "--validation-labels",
        type=Path,
        help="labels of a flat validation directory: one wnid per line in file-name order, or '<file> <wnid>' lines",
    )
    c.add_argument("--synsets", type=Path, required=True, help="synset list, one wnid per line")
    c.add_argument("--metadata", type=Path, help="'<wnid>\\t<name>' lines (image/class/text)")
    c.add_argument("--bounding-boxes", type=Path, help="'<file>,<xmin>,<ymin>,<xmax>,<ymax>' lines, normalised")
    c.add_argument("--out", type=Path, required=True, help="output directory")
    c.add_argument("--train-shards", type=int, default=1024)
    c.add_argument("--validation-shards", type=int, default=128)
    c.add_argument("--seed", type=int, default=12345, help="shuffle seed (default: the reference's 12345)")
    c.add_argument("--workers", type=int, default=None, help="processes (default: usable cores)")
    c.add_argument("--recordio", action="store_true", help="also write MXNet RecordIO (recordio/<split>.rec/.idx)")
    c.add_argument(
        "--full-decode",
        action="store_true",
        help="decode every JPEG to find corrupt data (slow; by default only truncation is checked)",
    )
    v = sub.add_parser("verify", help="check every record, the DALI indexes and the manifest")
    v.add_argument("out", type=Path)
    v.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)

    if args.command == "verify":
        errors = verify(args.out, args.workers)
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        if errors:
            print(f"verify: {len(errors)} problem(s) in {args.out}", file=sys.stderr)
            return 1
        print(f"verify: {args.out} OK")
        return 0
    try:
        convert(
            args.out,
            args.synsets,
            args.train_dir,
            args.validation_dir,
            args.validation_labels,
            args.metadata,
            args.bounding_boxes,
            args.train_shards,
            args.validation_shards,
            args.seed,
            args.workers,
            args.recordio,
            args.full_decode,
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing failed (disk full, permissions): shards already renamed stay
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
