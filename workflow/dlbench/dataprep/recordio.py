"""MXNet RecordIO (.rec + .idx) without MXNet, byte for byte what `mxnet.recordio` writes.

A record is `uint32 magic 0xced7230a | uint32 lrecord | payload | zero padding to 4 bytes`, with
lrecord = cflag << 29 | length (dmlc-core recordio.cc). Where the payload holds the magic number at a
4-byte-aligned position, the writer splits it there (cflag 1 = first part, 2 = middle, 3 = last) and drops
those 4 bytes; the reader puts them back. JPEG data meets the magic by chance about once per 150,000 images,
so a writer that skipped this would corrupt a handful of ImageNet records.

An image record's payload is `IRHeader` ('IfQQ': flag 0, float label, uint64 id, uint64 id2) followed by the
image bytes (`mxnet.recordio.pack`). The index file has one `<id>\\t<offset>` line per record.

CLI: `python -m dlbench.dataprep.recordio check FILE.rec [--idx FILE.idx]` reads every record back.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_PART = struct.Struct("<II")
IR_HEADER = struct.Struct("<IfQQ")  # flag, label, id, id2 (native 'IfQQ' on little-endian hosts: 24 bytes)
MAX_LENGTH = (1 << 29) - 1


class CorruptRecordIO(ValueError):
    """A .rec/.idx file that does not read back; names the file and the record."""


def _lrec(cflag: int, length: int) -> bytes:
    return _PART.pack(MAGIC, cflag << 29 | length)


def frame(payload: bytes) -> list[bytes]:
    """The pieces that make up one record on disk (joined, they are the record), splitting at an aligned magic."""
    size = len(payload)
    if size > MAX_LENGTH:
        raise ValueError(f"RecordIO records are limited to {MAX_LENGTH} bytes, got {size}")
    pieces: list[bytes] = []
    start = 0
    pos = payload.find(_MAGIC_BYTES)
    while pos != -1:
        if pos % 4 == 0:  # only aligned occurrences are escaped (as dmlc-core does)
            pieces += [_lrec(1 if start == 0 else 2, pos - start), payload[start:pos]]
            start = pos + 4
            pos = payload.find(_MAGIC_BYTES, start)
        else:
            pos = payload.find(_MAGIC_BYTES, pos + 1)
    pieces += [_lrec(3 if start else 0, size - start), payload[start:] if start else payload]
    if size % 4:
        pieces.append(b"\0" * (4 - size % 4))
    return pieces


def pack(label: float, record_id: int, data: bytes, id2: int = 0) -> bytes:
    """`mxnet.recordio.pack(IRHeader(0, label, record_id, id2), data)`."""
    return IR_HEADER.pack(0, label, record_id, id2) + data


def unpack(payload: bytes) -> tuple[float, int, int, bytes]:
    """(label, id, id2, data) of a payload written by `pack` (scalar labels only)."""
    flag, label, record_id, id2 = IR_HEADER.unpack_from(payload)
    data = payload[IR_HEADER.size :]
    if flag:  # a vector label: `flag` float32 values before the data
        raise ValueError(f"record {record_id} has a {flag}-value label; only scalar labels are supported")
    return label, record_id, id2, data


class RecordIOWriter:
    """Appends records to an open binary file, remembering (key, offset) for the .idx file."""

    def __init__(self, file: BinaryIO, base: int = 0) -> None:
        self._file = file
        self.offset = base
        self.index: list[tuple[int, int]] = []

    def write(self, key: int, payload: bytes) -> int:
        """Write one record; its size on disk."""
        pieces = frame(payload)
        self._file.writelines(pieces)
        size = sum(map(len, pieces))
        self.index.append((key, self.offset))
        self.offset += size
        return size


def index_text(index: Sequence[tuple[int, int]]) -> str:
    return "".join(f"{key}\t{offset}\n" for key, offset in index)


def read_index(path: str | Path) -> list[tuple[int, int]]:
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].lstrip("-").isdigit() or not parts[1].isdigit():
            raise CorruptRecordIO(f"{path}: line {number}: expected '<id>\\t<offset>', got {line!r}")
        out.append((int(parts[0]), int(parts[1])))
    return out


def read_records(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every record in file order, re-joining split records; CorruptRecordIO names the
    record index and byte offset of the first thing that does not read."""
    with open(path, "rb") as f:
        data = f.read()
    pos, index, end = 0, 0, len(data)
    while pos < end:
        start, parts = pos, []
        while True:
            if pos + 8 > end:
                raise CorruptRecordIO(f"{path}: record {index} (byte offset {start}): truncated header")
            magic, lrec = _PART.unpack_from(data, pos)
            if magic != MAGIC:
                raise CorruptRecordIO(f"{path}: record {index} (byte offset {pos}): bad magic {magic:#010x}")
            cflag, length = lrec >> 29, lrec & MAX_LENGTH
            padded = (length + 3) & ~3
            if pos + 8 + padded > end:
                raise CorruptRecordIO(
                    f"{path}: record {index} (byte offset {start}): truncated data "
                    f"(file ends inside a {length}-byte part)"
                )
            parts.append(data[pos + 8 : pos + 8 + length])
            pos += 8 + padded
            if cflag in (0, 3):
                break
            if cflag not in (1, 2):
                raise CorruptRecordIO(f"{path}: record {index} (byte offset {start}): bad continuation flag {cflag}")
        yield start, _MAGIC_BYTES.join(parts)
        index += 1


def check(rec: str | Path, idx: str | Path | None = None) -> int:
    """Read every record (and check the index points at record starts); the number of records."""
    offsets: list[int] = []
    for offset, payload in read_records(rec):
        if len(payload) < IR_HEADER.size:
            raise CorruptRecordIO(f"{rec}: record {len(offsets)} (byte offset {offset}): shorter than IRHeader")
        offsets.append(offset)
    if idx is not None:
        entries = read_index(idx)
        if [o for _, o in entries] != offsets:
            raise CorruptRecordIO(f"{idx}: offsets do not match the {len(offsets)} records of {rec}")
    return len(offsets)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.dataprep.recordio", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="read every record of a .rec file (and its .idx) back")
    p.add_argument("rec", type=Path)
    p.add_argument("--idx", type=Path)
    args = parser.parse_args(argv)
    try:
        count = check(args.rec, args.idx)
    except (OSError, CorruptRecordIO) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.rec}: {count} records OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
