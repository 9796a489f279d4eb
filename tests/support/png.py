"""A small PNG reader (standard library only) for the pictures tests render in a browser.

Reads 8-bit, non-interlaced truecolour images (with or without alpha), which is what headless
Chromium writes for a screenshot; anything else raises ``ValueError`` naming what it found.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Image:
    width: int
    height: int
    pixels: list[tuple[int, int, int]]
    """Row-major RGB triples (alpha dropped: screenshots are opaque)."""

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        return self.pixels[y * self.width + x]

    @cached_property
    def colours(self) -> Counter[tuple[int, int, int]]:
        """How many pixels have each colour."""
        return Counter(self.pixels)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read(path: Path) -> Image:
    data = path.read_bytes()
    if data[:8] != _SIGNATURE:
        raise ValueError(f"{path} is not a PNG file")
    offset = 8
    idat = bytearray()
    width = height = channels = 0
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise ValueError(
                    f"unsupported PNG: bit depth {depth}, colour type {colour}, "
                    f"interlace {interlace}"
                )
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    previous = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    position = 0
    for _ in range(height):
        kind = raw[position]
        line = bytearray(raw[position + 1 : position + 1 + stride])
        position += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(left, up, corner)) & 0xFF
        pixels.extend((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, channels))
        previous = line
    return Image(width, height, pixels)
