"""Media users send: images prepared for the model, files saved to the agent's inbox, history references."""

from __future__ import annotations

from agenthub.media.drop_folder import Intake, MediaInbox
from agenthub.media.images import ImageRejectedError, PreparedImage, prepare_image
from agenthub.media.loader import ImageCache, LoadedImage
from agenthub.media.names import chat_dir_name, inbox_dir, safe_file_name
from agenthub.media.refs import image_ref, image_ref_source, is_image_ref, media_text

__all__ = [
    "ImageCache",
    "ImageRejectedError",
    "Intake",
    "LoadedImage",
    "MediaInbox",
    "PreparedImage",
    "chat_dir_name",
    "image_ref",
    "image_ref_source",
    "inbox_dir",
    "is_image_ref",
    "media_text",
    "prepare_image",
    "safe_file_name",
]
