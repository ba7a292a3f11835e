"""The TFRecord codec without TensorFlow (google-crc32c; numpy only for the vectorised functions and parsing):
record framing with masked CRC32C, protobuf varints and fields, tf.train.Example encoding, and the reader that
checks and parses. Scalar and vectorised forms of the same encodings live side by side here: the ImageNet
converter writes one record at a time (no numpy), the BERT shards a whole batch of records at once, verification
and the tests read them back.

A TFRecord is a sequence of records, each `uint64 length | uint32 masked_crc32c(length) | data |
uint32 masked_crc32c(data)` (little endian). An Example is the protobuf message
    Example { Features features = 1 }   Features { map<string, Feature> feature = 1 }
    Feature { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }
with packed float/int64 lists. Encoding it by hand is ~40 lines and several times faster than building
protobuf objects; the tests read every output back with TensorFlow's and DALI's own readers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeAlias, TypeGuard

import google_crc32c

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where it is used: the ImageNet converter needs none of it, and importing it costs
# ~0.1 s per worker (a fifth of converting 3,500 images).
FeatureValue: TypeAlias = "bytes | str | Sequence[bytes | str] | Sequence[int] | Sequence[float] | np.ndarray"

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER = struct.Struct("<QI")
HEADER_BYTES, FOOTER_BYTES = _HEADER.size, _CRC.size
OVERHEAD = HEADER_BYTES + FOOTER_BYTES  # a record's bytes on disk = its data + OVERHEAD


class CorruptRecord(ValueError):
    """A TFRecord file is truncated or fails its CRC; says which file and which record."""

    def __init__(self, path: str | Path, index: int, offset: int, reason: str) -> None:
        super().__init__(f"{path}: record {index} (byte offset {offset}): {reason}")
        self.path, self.index, self.offset, self.reason = str(path), index, offset, reason


# ----------------------------------------------------------------------------- CRC32C masking and framing
def mask(crc: int) -> int:
    """TFRecord's CRC mask: rotate right by 15 bits, add a constant."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def mask_array(crcs: np.ndarray) -> np.ndarray:
    """mask() of many CRCs at once (uint64 in, uint64 out)."""
    import numpy as np

    crc = np.asarray(crcs).astype(np.uint64)
    return (((crc >> np.uint64(15)) | (crc << np.uint64(17))) + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)


def masked_crc(data: bytes) -> int:
    return mask(google_crc32c.value(data))


def record_header(length: int) -> bytes:
    """The 12 bytes before a record's data: its length and the masked CRC of those 8 bytes."""
    length_bytes = _LENGTH.pack(length)
    return length_bytes + _CRC.pack(masked_crc(length_bytes))


def frame_parts(head: bytes, body: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """One record whose data is head + body, as (header + head, body, footer): written one after the other
    (os.writev) they are the record, and the body (an image) is never copied."""
    crc = google_crc32c.value(head)
    if body:
        crc = google_crc32c.extend(crc, body)
    return record_header(len(head) + len(body)) + head, body, _CRC.pack(mask(crc))


def frame(data: bytes) -> bytes:
    """One record: header, data, footer."""
    return record_header(len(data)) + data + _CRC.pack(masked_crc(data))


def record_headers(lengths: np.ndarray) -> np.ndarray:
    """record_header() of many records: uint8 [n, 12] (one CRC per distinct length)."""
    import numpy as np

    lengths = np.asarray(lengths).astype("<u8")
    out = np.empty((len(lengths), HEADER_BYTES), np.uint8)
    out[:, :8] = lengths[:, None].view(np.uint8)
    # the distinct lengths by sort and search: np.unique would import numpy.ma (~10 ms in each worker process)
    ordered = np.sort(lengths)
    uniq = ordered[np.flatnonzero(np.diff(ordered, prepend=ordered[:1] + 1))]
    crcs = np.array([masked_crc(x.tobytes()) for x in uniq], "<u4")
    out[:, 8:] = crcs[np.searchsorted(uniq, lengths)][:, None].view(np.uint8)
    return out


def fill_footers(records: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Write each record's masked data CRC into its 4-byte footer, in place: records is the uint8 array of many
    framed records, record i's data is records[starts[i]:ends[i]] and its footer follows."""
    import numpy as np

    data = records.tobytes()  # google_crc32c takes bytes only (not memoryviews)
    value = google_crc32c.value
    crcs = np.array([value(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)], np.uint64)
    footer = mask_array(crcs).astype("<u4").view(np.uint8).reshape(-1, FOOTER_BYTES)
    records[ends[:, None] + np.arange(FOOTER_BYTES)] = footer


# ----------------------------------------------------------------------------- protobuf varints
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64: ten bytes, two's complement (protobuf's rule)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _as_uint64(values: np.ndarray) -> np.ndarray:
    import numpy as np

    v = np.asarray(values)
    return v if v.dtype == np.uint64 else v.astype(np.int64).view(np.uint64)


def varint_lengths(values: np.ndarray, width: int = 10) -> np.ndarray:
    """Bytes of each value's varint (int64 values; negative ones take ten), counted up to `width`."""
    import numpy as np

    v = _as_uint64(values)
    n = np.ones(v.shape, np.int64)
    for k in range(1, width):
        n += v >= np.uint64(1 << (7 * k))
    return n


def varint_slots(values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints of values < 2**(7 * width) in fixed `width`-byte slots: (uint8 [..., width], valid [..., width]).
    The valid bytes of the slots, in order, are the varints (the vectorised encoder's building block)."""
    import numpy as np

    v = _as_uint64(values)
    groups = (v[..., None] >> (np.uint64(7) * np.arange(width, dtype=np.uint64))) & np.uint64(0x7F)
    valid = np.arange(width) < varint_lengths(v, width)[..., None]
    more = np.zeros_like(valid)
    more[..., :-1] = valid[..., 1:]
    return (groups | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8), valid


def varints(values: np.ndarray) -> bytes:
    """The varints of many int64 values, concatenated (a packed repeated field's payload)."""
    import numpy as np

    v = _as_uint64(np.ascontiguousarray(values).ravel())
    if v.size == 0:
        return b""
    data, valid = varint_slots(v, int(varint_lengths(v).max()))
    return data[valid].tobytes()


# ----------------------------------------------------------------------------- protobuf fields and Examples
BYTES_LIST, FLOAT_LIST, INT64_LIST = 1, 2, 3  # Feature's field numbers


_TAGS = [varint(number << 3 | 2) for number in range(16)]  # Examples use field numbers 1..3 only
_KEYS: dict[str, bytes] = {}  # a feature name, encoded as a map entry's key field, by name


def tag(number: int) -> bytes:
    """The tag of a length-delimited field (wire type 2)."""
    return _TAGS[number]


def field_head(number: int, payload_len: int) -> bytes:
    """Tag and length of a length-delimited field; its payload follows."""
    return _TAGS[number] + varint(payload_len)


def field(number: int, payload: bytes) -> bytes:
    return _TAGS[number] + varint(len(payload)) + payload


def _key(key: str) -> bytes:
    encoded = _KEYS.get(key)
    if encoded is None:
        encoded = _KEYS[key] = field(1, key.encode())
    return encoded


def bytes_feature(values: Sequence[bytes]) -> bytes:
    return field(BYTES_LIST, b"".join([field(1, v) for v in values]))


def packed_feature(kind: int, payload: bytes) -> bytes:
    """A FloatList / Int64List Feature from its packed values; an empty list is an empty message, as protobuf
    writes it (no zero-length packed field)."""
    return field(kind, field(1, payload) if payload else b"")


def int64_feature(values: Sequence[int]) -> bytes:
    return packed_feature(INT64_LIST, b"".join(varint(v) for v in values))


def float_feature(values: Sequence[float]) -> bytes:
    return packed_feature(FLOAT_LIST, struct.pack(f"<{len(values)}f", *values))


def entry(key: str, feature_bytes: bytes) -> bytes:
    """One entry of Features.feature (a map entry: {1: key, 2: Feature})."""
    return field(1, _key(key) + field(2, feature_bytes))


def entry_head(key: str, kind: int, payload_len: int) -> bytes:
    """An entry whose Feature holds one list of `kind` with a payload of payload_len bytes, up to that payload:
    the packed values of a FLOAT_LIST / INT64_LIST, or the single value of a BYTES_LIST. The payload follows
    (so a large one is never copied, and entries of many records can share their framing)."""
    inner = field_head(1, payload_len)
    listed = field_head(kind, len(inner) + payload_len) + inner
    value = field_head(2, len(listed) + payload_len) + listed
    name = _key(key)
    return field_head(1, len(name) + len(value) + payload_len) + name + value


def _texts(values: Sequence[Any]) -> TypeGuard[Sequence[bytes | str]]:
    """A list of bytes/str, as its first item says."""
    return bool(len(values)) and isinstance(values[0], (bytes, str))


def feature(value: FeatureValue) -> bytes:
    """An encoded Feature: bytes/str (or a list of them) -> bytes_list, float arrays/lists -> float_list,
    int arrays/lists -> int64_list."""
    import numpy as np

    if isinstance(value, (bytes, str)):
        value = [value]
    if isinstance(value, np.ndarray):
        kind = "float" if value.dtype.kind == "f" else "int"
    elif _texts(value):
        return bytes_feature([v.encode() if isinstance(v, str) else v for v in value])
    elif len(value) and isinstance(value[0], float):
        kind = "float"
    else:
        kind = "int"
    if kind == "float":
        return packed_feature(FLOAT_LIST, np.asarray(value, "<f4").tobytes())
    return packed_feature(INT64_LIST, varints(np.asarray(value, np.int64)))


def example(features: Mapping[str, FeatureValue]) -> bytes:
    """A serialised tf.train.Example with the features in the given order (deterministic bytes)."""
    return field(1, b"".join(entry(key, feature(value)) for key, value in features.items()))


# ----------------------------------------------------------------------------- writing
class TFRecordWriter:
    """Writes framed records and remembers each one's (offset, size) for the DALI index."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self.index: list[tuple[int, int]] = []
        self.bytes_written = 0

    def write(self, data: bytes) -> None:
        record = frame(data)
        self._file.write(record)
        self.index.append((self.bytes_written, len(record)))
        self.bytes_written += len(record)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dali_index_text(index: Sequence[tuple[int, int]]) -> str:
    """DALI's tfrecord2idx format: one `<offset> <record bytes>` line per record."""
    return "".join(f"{offset} {size}\n" for offset, size in index)


def write_dali_index(path: str | Path, index: Sequence[tuple[int, int]]) -> None:
    Path(path).write_text(dali_index_text(index))


# ----------------------------------------------------------------------------- reading and checking
def read_records(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(offset, data) of every record, checking lengths and both CRCs; CorruptRecord names the record."""
    with open(path, "rb") as f:
        index, offset = 0, 0
        while header := f.read(HEADER_BYTES):
            if len(header) < HEADER_BYTES:
                raise CorruptRecord(path, index, offset, f"truncated header ({len(header)} of 12 bytes)")
            length, length_crc = _HEADER.unpack(header)
            if masked_crc(header[:8]) != length_crc:
                raise CorruptRecord(path, index, offset, "length CRC mismatch")
            data = f.read(length)
            footer = f.read(FOOTER_BYTES)
            if len(data) < length or len(footer) < FOOTER_BYTES:
                raise CorruptRecord(path, index, offset, f"truncated data (file ends inside a {length}-byte record)")
            if masked_crc(data) != _CRC.unpack(footer)[0]:
                raise CorruptRecord(path, index, offset, "data CRC mismatch")
            yield offset, data
            offset += length + OVERHEAD
            index += 1


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, bytes]]:
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        if tag & 7 != 2:
            raise ValueError(f"unexpected wire type {tag & 7}")
        size, pos = _read_varint(buf, pos)
        yield tag >> 3, buf[pos : pos + size]
        pos += size


def parse_example(data: bytes) -> dict[str, list]:
    """Decode an Example (for verification and tests): name -> list of bytes, floats or ints."""
    import numpy as np

    out: dict[str, list] = {}
    for _, features in _fields(data):
        for _, item in _fields(features):
            parts = dict(_fields(item))
            key = parts[1].decode()
            for kind, payload in _fields(parts.get(2, b"")):
                values = [v for _, v in _fields(payload)]
                if kind == BYTES_LIST:
                    out[key] = values
                elif kind == FLOAT_LIST:
                    out[key] = np.frombuffer(b"".join(values), "<f4").tolist()
                else:
                    packed, ints, pos = b"".join(values), [], 0
                    while pos < len(packed):
                        value, pos = _read_varint(packed, pos)
                        ints.append(value - (1 << 64) if value >= 1 << 63 else value)
                    out[key] = ints
            out.setdefault(key, [])
    return out
