"""One image as the records hold it: a JPEG's size from its frame header, copied exactly; anything else
(PNG, CMYK) re-encoded as RGB JPEG at quality 100; an unusable file is a BadImage (skipped and listed)."""

from __future__ import annotations

import io

_EOI_WINDOW = 1024  # an end-of-image marker this close to the end means "not truncated"


class BadImage(Exception):
    """One image that cannot go into the records (skipped and listed)."""


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
