"""Gathering one JSON record per rank over a framework's numeric collectives (an all-reduce or an all-gather of
arrays): each rank's record is UTF-8 bytes in a zero-padded row of ROW_BYTES; summing rows where only one rank
wrote each, or gathering them, gives every rank every record. Byte values 0-255 are exact in float32, so a
float all-reduce carries them unchanged. Standard library and numpy only (the harness's rule)."""

from __future__ import annotations

import json

import numpy as np

ROW_BYTES = 16384  # room for one rank's record (its summary facts, a few hundred bytes in practice)


def encode_row(obj: object) -> np.ndarray:
    """`obj` as JSON bytes in a zero-padded uint8 row of ROW_BYTES (JSON text has no zero bytes)."""
    data = np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)
    if data.size > ROW_BYTES:
        raise ValueError(f"all_gather: {data.size} bytes of JSON, more than {ROW_BYTES} per rank")
    row = np.zeros(ROW_BYTES, np.uint8)
    row[: data.size] = data
    return row


def decode_rows(rows: np.ndarray) -> list:
    """The records of `rows` ([ranks, ROW_BYTES] byte values in any numeric dtype), in row order."""
    as_bytes = np.asarray(rows).reshape(-1, ROW_BYTES).round().astype(np.uint8)
    return [json.loads(row.tobytes().rstrip(b"\0")) for row in as_bytes]
