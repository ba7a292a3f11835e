"""The on-disk layout of the prepared datasets: file names of shards, index directories and manifests.

Standard library only: the converters (dataprep/, dataprep environment) write these layouts, their `verify`
steps check them, and the harness (harness/datasets.py, inside framework environments that hold only the
standard library, numpy and the framework) finds the shards by them.

ImageNet (dataprep/imagenet.py), in one directory:
    train-00000-of-01024 ... validation-00000-of-00128   TFRecord shards (no extension: `train-*` is the shards)
    dali_index/<shard>.idx                             DALI tfrecord2idx index of each shard
    recordio/{train,validation}.{rec,idx}              MXNet RecordIO (optional)
    manifest.json
BERT (dataprep/bert_shards/), one directory per sequence length:
    tfrecord/<name>-00000-of-NNNNN                     Google's features
    hdf5/<name>-00000-of-NNNNN.hdf5                    NVIDIA's layout
    manifest.json, or manifest.group-IIIII-of-NNNNN.json per group of shards before they are merged
"""

from __future__ import annotations

import re
from pathlib import Path

MANIFEST = "manifest.json"
NAME = r"[A-Za-z0-9_.-]+"  # a shard name's prefix: ASCII letters, digits, '.', '_', '-'
MAX_SHARDS = 99_999  # five-digit shard numbers
_SHARD = re.compile(rf"^({NAME})-(\d{{5}})-of-(\d{{5}})$")


def shard_name(prefix: str, index: int, count: int) -> str:
    """`<prefix>-<index>-of-<count>`, both numbers five digits (TensorFlow's and NVIDIA's convention)."""
    return f"{prefix}-{index:05d}-of-{count:05d}"


def parse_shard_name(name: str) -> tuple[str, int, int] | None:
    """(prefix, index, count) of a shard name, None for any other name."""
    m = _SHARD.match(name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def shard_files(directory: Path, prefixes: tuple[str, ...] | None = None, suffix: str = "") -> list[Path]:
    """The shard files in a directory (names `<prefix>-IIIII-of-NNNNN<suffix>`, of the given prefixes), sorted."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        parsed = path.name.endswith(suffix) and parse_shard_name(path.name[:len(path.name) - len(suffix)])
        if parsed and (prefixes is None or parsed[0] in prefixes):
            found.append(path)
    return sorted(found)


# ----------------------------------------------------------------------------- ImageNet
IMAGENET_SPLITS = ("train", "validation")
DALI_INDEX_DIR = "dali_index"
RECORDIO_DIR = "recordio"


def dali_index(shard: str) -> str:
    """A shard's DALI index file, relative to the dataset directory."""
    return f"{DALI_INDEX_DIR}/{shard}.idx"


def recordio(split: str) -> tuple[str, str]:
    """A split's RecordIO (.rec, .idx), relative to the dataset directory."""
    return f"{RECORDIO_DIR}/{split}.rec", f"{RECORDIO_DIR}/{split}.idx"


def imagenet_shards(root: Path, split: str) -> list[Path]:
    return shard_files(root, (split,))


# ----------------------------------------------------------------------------- BERT
BERT_FORMATS = {"tfrecord": "", "hdf5": ".hdf5"}  # format = its directory -> the shards' suffix
GROUP_MANIFESTS = "manifest.group-*-of-*.json"


def bert_shard(fmt: str, name: str, index: int, count: int) -> str:
    """A BERT shard of one format, relative to the dataset directory."""
    return f"{fmt}/{shard_name(name, index, count)}{BERT_FORMATS[fmt]}"


def bert_shards(root: Path, fmt: str) -> list[Path]:
    return shard_files(root / fmt, suffix=BERT_FORMATS[fmt])


def group_manifest(group: int, groups: int) -> str:
    """The manifest of one group of shards (`--shard-group group/groups`)."""
    return f"manifest.group-{group:05d}-of-{groups:05d}.json"
