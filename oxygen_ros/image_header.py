"""The width and height a PNG or JPEG declares, read from its header without decoding.

A compressed image is tiny on the wire and huge in memory: a 187 KB PNG can declare
8000 x 8000 pixels, which a decoder turns into 192 MB of RGB (and more while it works),
taking a frame's time and the process's memory. Pillow's own decompression-bomb check
only warns below 89 Mpx, far above what a robot camera sends. So the converter reads the
declared size here first, from a few bytes, and refuses an image beyond its limit before
any decoder sees it.

Both formats put the size in a fixed place a decoder must honour:

- PNG: the IHDR chunk, which the format requires to come first, right after the 8-byte
  signature: length (4), "IHDR", width (4), height (4), big-endian.
- JPEG: the first start-of-frame segment (SOF0..SOF15 except DHT, JPG and DAC), found by
  walking the segments from SOI: each is 0xFF, a marker byte and (for most markers) a
  big-endian length that counts itself. SOF holds precision (1), height (2), width (2).
  The walk is bounded by the data's length and jumps a segment at a time.
"""

from __future__ import annotations

import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SIGNATURE = b"\xff\xd8\xff"
# SOF markers: C0-CF without C4 (DHT), C8 (JPG) and CC (DAC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field: TEM, RST0-7, SOI, EOI.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xDA)})
_SOS = 0xDA  # start of scan: entropy-coded data follows, no SOF can come before it now


class HeaderError(ValueError):
    """The header does not say how large the image is."""


def declared_size(data: bytes) -> tuple[int, int]:
    """(width, height) declared by a PNG or JPEG header; HeaderError when it has none."""
    if data.startswith(PNG_SIGNATURE):
        return _png_size(data)
    if data.startswith(JPEG_SIGNATURE):
        return _jpeg_size(data)
    raise HeaderError("neither a PNG nor a JPEG signature")


def _png_size(data: bytes) -> tuple[int, int]:
    ihdr = data[8:24]
    if len(ihdr) < 16 or ihdr[4:8] != b"IHDR":
        raise HeaderError("PNG does not start with an IHDR chunk")
    return struct.unpack(">II", ihdr[8:16])


def _jpeg_size(data: bytes) -> tuple[int, int]:
    at = 2  # after SOI
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            raise HeaderError(f"JPEG segment at byte {at} does not start with 0xFF")
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        if marker == _SOS:
            break
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _SOF:
            frame = data[at + 4 : at + 9]
            if len(frame) < 5:
                break
            height, width = struct.unpack(">HH", frame[1:5])
            return width, height
        if length < 2:
            raise HeaderError(f"JPEG segment at byte {at} has length {length}")
        at += 2 + length
    raise HeaderError("JPEG has no frame header (SOF) before its image data")
