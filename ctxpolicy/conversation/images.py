"""Width and height of an image read from its first bytes (nothing else is decoded),
for the token rules of images: :func:`png_gif_size` for the formats every counter
reads, :func:`image_size` for JPEG and WebP too."""

from __future__ import annotations

import struct

__all__ = ["image_size", "png_gif_size"]


def png_gif_size(head: bytes) -> tuple[int, int] | None:
    """Width and height from the first bytes of a PNG or GIF image (None for another)."""
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return w, h
        i += 2 + struct.unpack(">H", head[i + 2 : i + 4])[0]
    return None


def image_size(head: bytes) -> tuple[int, int] | None:
    """Width and height from the first bytes of a PNG, GIF, JPEG or WebP image."""
    size = png_gif_size(head)
    if size is not None:
        return size
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        kind = head[12:16]
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", head[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = int.from_bytes(head[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8X":
            return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(
                head[27:30], "little"
            ) + 1
    return None
