"""The raw ImageNet tree and its lists: the synsets, metadata and bounding boxes; each split's images in
per-synset folders or flat with a labels file; the seeded shuffle that fixes their order."""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from dlbench import layout

SPLITS = layout.IMAGENET_SPLITS
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


class InputError(Exception):
    """Bad input that stops the whole run (a missing directory, a malformed list); names the file."""


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
