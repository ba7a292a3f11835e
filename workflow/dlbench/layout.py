"""The on-disk layout of the prepared datasets: file names of shards, index directories and manifests.

Standard library only: the converters (dataprep/, dataprep environment) write these layouts, their `verify`
steps check them, and the harness (harness/datasets.py, inside framework environments that hold only the
standard library, numpy and the framework) finds the shards by them.

ImageNet (dataprep/imagenet/), in one directory:
    train-00000-of-01024 ... validation-00000-of-00128   TFRecord shards (no extension: `train-*` is the shards)
    dali_index/<shard>.idx                             DALI tfrecord2idx index of each shard
    recordio/{train,validation}.{rec,idx}              MXNet RecordIO (optional)
    manifest.json
BERT (dataprep/bert_shards/), one directory per sequence length:
    tfrecord/<name>-00000-of-NNNNN                     Google's features
    hdf5/<name>-00000-of-NNNNN.hdf5                    NVIDIA's layout
    manifest.json, or manifest.group-IIIII-of-NNNNN.json per group of shards before they are merged
Llama (dataprep/llama_tokens.py), in one directory:
    tokenizer.json                                     the byte-level BPE (Hugging Face tokenizers' format)
    tokens-00000-of-NNNNN.bin                          flat little-endian token ids (manifest: dtype uint16 or
                                                       uint32), documents joined by the end-of-text token
    manifest.json                                      vocab_size, eot_id, dtype, and each shard's token count
All: verified.txt (the verification's log) and verified-files.json (each data file's size and modification
time when verification passed; the supervisor checks them again before a run reads the data).
"""

from __future__ import annotations

import json
import re
import struct
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
        parsed = path.name.endswith(suffix) and parse_shard_name(path.name[: len(path.name) - len(suffix)])
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


# ----------------------------------------------------------------------------- Llama
TOKEN_PREFIX, TOKEN_SUFFIX = "tokens", ".bin"
TOKENIZER = "tokenizer.json"
TOKEN_DTYPES = {"uint16": 2, "uint32": 4}  # the manifest's dtype -> bytes per token (little-endian)


def token_dtype(vocab_size: int) -> str:
    """The narrowest dtype that holds every id of the vocabulary."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def token_shard(index: int, count: int) -> str:
    """A token shard, relative to the dataset directory."""
    return f"{shard_name(TOKEN_PREFIX, index, count)}{TOKEN_SUFFIX}"


def token_shards(root: Path) -> list[Path]:
    return shard_files(root, (TOKEN_PREFIX,), suffix=TOKEN_SUFFIX)


# ---- what verification saw: every data file's size and modification time, checked again before a run reads them
VERIFIED_FILES = "verified-files.json"
_NOT_DATA = (MANIFEST, VERIFIED_FILES, "verified.txt")


def data_files(root: Path) -> list[Path]:
    """Every file of a prepared dataset that runs read (shards, indexes, RecordIO), not its bookkeeping."""
    return sorted(
        p
        for p in Path(root).rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.name not in _NOT_DATA and not p.name.startswith("manifest.")
    )


def snapshot(root: Path) -> dict[str, list[int]]:
    """{relative path: [bytes, mtime_ns]} of the dataset's data files, taken when verification passed."""
    root = Path(root)
    return {str(p.relative_to(root)): [p.stat().st_size, p.stat().st_mtime_ns] for p in data_files(root)}


def write_snapshot(root: Path) -> Path:
    path = Path(root) / VERIFIED_FILES
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(snapshot(root), indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def changed_since_verification(root: Path) -> list[str]:
    """Problems of data files that differ from what verification saw (changed, truncated, added, removed), each
    naming the file and, for a TFRecord file that no longer frames, the first record that does not. Data that
    no workflow verified (no verified-files.json: the harness run by hand on a directory) is not checked."""
    root = Path(root)
    if not (root / VERIFIED_FILES).exists():
        return []
    try:
        seen = json.loads((root / VERIFIED_FILES).read_text())
    except ValueError:
        return [f"{root / VERIFIED_FILES}: unreadable: verify the dataset again"]
    now = snapshot(root)
    problems = []
    for name in sorted(set(seen) | set(now)):
        if name not in now:
            problems.append(f"{root / name}: removed after verification")
        elif name not in seen:
            problems.append(f"{root / name}: added after verification")
        elif now[name] != seen[name]:
            size, _ = seen[name]
            record = first_unframed_record(root / name) if "/" not in name or name.startswith("tfrecord/") else None
            where = f"; record {record} is the first that does not frame" if record is not None else ""
            problems.append(f"{root / name}: changed after verification ({size} bytes then, {now[name][0]} now{where})")
    return problems


def first_unframed_record(path: Path) -> int | None:
    """The index of the first TFRecord record whose framing (length, length CRC, data, data CRC: 16 bytes around
    the data) runs past the end of the file; None when every record frames (a change inside a record is found by
    its CRC, which `verify` checks)."""
    size, offset, index = path.stat().st_size, 0, 0
    with open(path, "rb") as f:
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                return index
            (length,) = struct.unpack("<Q", header[:8])
            offset += 12 + length + 4
            if offset > size:
                return index
            f.seek(offset)
            index += 1
    return None


def main(argv: list[str] | None = None) -> int:
    """`python -m dlbench.layout snapshot DIR`: record what verification saw (the verify rules run it
    last)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m dlbench.layout")
    p.add_argument("command", choices=("snapshot",))
    p.add_argument("directory", type=Path)
    args = p.parse_args(argv)
    print(f"dlbench: {len(snapshot(args.directory))} data files recorded in {write_snapshot(args.directory)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
