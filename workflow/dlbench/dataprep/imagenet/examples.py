"""The tf.train.Example of one image in the reference's schema (build_imagenet_data.py's keys and order),
encoded from precomputed pieces."""

from __future__ import annotations

from collections.abc import Sequence

from dlbench.dataprep import tfrecord as tfr

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
