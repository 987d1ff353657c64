"""Images brought within the model vendor's limits: a supported type, at most so many bytes and pixels per edge.

Pillow is imported by the first `prepare_image` (in its worker thread), not at start-up: it costs a quarter second.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from PIL import Image

API_MEDIA_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
"""The image types the Messages API takes (`Base64ImageSourceParam.media_type` in the anthropic SDK)."""
EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/webp": "webp"}
OPENED_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP")
"""The only decoders Pillow may try (never EPS, which runs Ghostscript, nor TIFF and the other rarely-fuzzed ones);
BMP is re-encoded."""
API_MAX_EDGE_PX = 8000
MAX_PIXELS = 36_000_000
"""A larger picture is refused before it is decoded (Pillow's own bomb guard errors only at twice its 89 M). PNG,
GIF, WebP and BMP decode whole: a flat 8000×8000 PNG (a 200 KB file, 64 MP) cost 500–800 MB and 5–6 s of CPU.
36 MP still takes an 8K screenshot (7680×4320, 33 MP) and keeps one decode under ~150 MB (RGBA) plus its copies."""
JPEG_MAX_PIXELS = 64_000_000
"""A JPEG is decoded scaled (`draft`, 1/2 to 1/8) when it will be shrunk, so a 48–50 MP phone photo is taken in."""
MIN_EDGE_PX = 200
"""Shrinking to fit the byte limit stops here: a smaller picture would show the model nothing useful."""
SHRINK = 0.7
ORIENTATION_TAG = 0x0112

Reason = Literal["unreadable", "too_big"]


class ImageRejectedError(Exception):
    """The image cannot go to the model: `unreadable` (not a picture Pillow decodes) or `too_big` (too many
    pixels, or no encoding within the byte limit)."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason


@dataclass(frozen=True)
class PreparedImage:
    data: bytes
    media_type: str
    width: int
    height: int

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.media_type]


def prepare_image(data: bytes, *, max_bytes: int, max_edge_px: int) -> PreparedImage:
    """`data` as the model may receive it: kept as it is when it already fits, else turned upright, resized to
    `max_edge_px` and re-encoded (PNG/WebP with transparency, JPEG otherwise), shrinking further until it fits
    `max_bytes`. CPU-bound: call it off the event loop. Raises `ImageRejectedError` (any failure to decode is
    `unreadable`)."""
    from PIL import Image, ImageOps

    max_edge_px = min(max_edge_px, API_MAX_EDGE_PX)
    try:
        with Image.open(io.BytesIO(data), formats=OPENED_FORMATS) as image:
            if image.width * image.height > (JPEG_MAX_PIXELS if image.format == "JPEG" else MAX_PIXELS):
                raise ImageRejectedError("too_big")
            _decode_jpeg_scaled(image, max_edge_px)
            image.load()  # the whole decode: a truncated or corrupt file fails here, not at the vendor
            if _fits_as_is(image, len(data), max_bytes, max_edge_px):
                return PreparedImage(data, API_MEDIA_TYPES[image.format or ""], image.width, image.height)
            ImageOps.exif_transpose(image, in_place=True)  # no copy of a picture that is upright already
            return _re_encoded(image, max_bytes, max_edge_px)
    except ImageRejectedError:
        raise
    except Image.DecompressionBombError as e:  # Pillow refuses to open it at all
        raise ImageRejectedError("too_big") from e
    except Exception as e:  # a fuzzed file breaks decoders in undocumented ways (ZeroDivisionError, TypeError, …)
        raise ImageRejectedError("unreadable") from e


def _decode_jpeg_scaled(image: Image.Image, max_edge_px: int) -> None:
    """A JPEG that will be shrunk anyway is decoded at 1/2, 1/4 or 1/8 scale (never below the target size):
    several times faster for a phone photo, and the resize that follows looks the same."""
    longest = max(image.size)
    if image.format != "JPEG" or longest <= max_edge_px:
        return
    target = (image.width * max_edge_px // longest, image.height * max_edge_px // longest)
    image.draft(image.mode if image.mode in ("RGB", "L") else "RGB", target)


def _fits_as_is(image: Image.Image, size: int, max_bytes: int, max_edge_px: int) -> bool:
    rotated = image.getexif().get(ORIENTATION_TAG, 1) not in (1, None)
    return image.format in API_MEDIA_TYPES and size <= max_bytes and max(image.size) <= max_edge_px and not rotated


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _re_encoded(image: Image.Image, max_bytes: int, max_edge_px: int) -> PreparedImage:
    alpha = _has_alpha(image)
    mode = "RGBA" if alpha else "RGB"
    if image.mode != mode:  # converting to the same mode would only copy it
        image = image.convert(mode)
    edge = min(max(image.size), max_edge_px)
    while True:
        resized = _fit_edge(image, edge)
        for fmt, options in _encodings(alpha):
            encoded = _encode(resized, fmt, options)
            if len(encoded) <= max_bytes:
                return PreparedImage(encoded, API_MEDIA_TYPES[fmt], resized.width, resized.height)
        if edge <= MIN_EDGE_PX:
            raise ImageRejectedError("too_big")
        edge = max(MIN_EDGE_PX, int(edge * SHRINK))


def _fit_edge(image: Image.Image, edge: int) -> Image.Image:
    if max(image.size) <= edge:
        return image
    scale = edge / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    from PIL import Image

    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def _encodings(alpha: bool) -> list[tuple[str, dict[str, int | bool]]]:
    if alpha:
        return [("PNG", {"optimize": True}), ("WEBP", {"quality": 85}), ("WEBP", {"quality": 65})]
    return [("JPEG", {"quality": 85, "optimize": True}), ("JPEG", {"quality": 65, "optimize": True})]


def _encode(image: Image.Image, fmt: str, options: dict[str, int | bool]) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()
