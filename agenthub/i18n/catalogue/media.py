"""Texts channels write when a picture, file or voice note cannot be taken in."""

from __future__ import annotations

TEXTS: dict[str, dict[str, str]] = {
    "media.too_large": {
        "zh-CN": "这个{what}太大了（{size_mb} MB），我最多能接收 {limit_mb} MB 的{what}。",
        "en": "This {what} is too large ({size_mb} MB); I can take {what}s of up to {limit_mb} MB.",
    },
    "media.download_failed": {
        "zh-CN": "抱歉，这个{what}没能下载下来，请稍后再发一次。",
        "en": "Sorry, I could not download this {what}; please send it again in a moment.",
    },
    "media.unsupported": {
        "zh-CN": "抱歉，我还不能处理这种消息（{kind}）。可以发文字、图片或文件。",
        "en": "Sorry, I cannot handle this kind of message yet ({kind}). Text, pictures and files work.",
    },
    "media.voice_no_transcript": {
        "zh-CN": "抱歉，这条语音没有文字转写，我听不了语音。请发文字。",
        "en": "Sorry, this voice message came without a transcript, and I cannot listen to audio. Please type it.",
    },
    "media.image_unreadable": {
        "zh-CN": "抱歉，这张图片我打不开（文件损坏，或不是我能识别的图片格式）。请换成 JPG 或 PNG 再发一次。",
        "en": "Sorry, I cannot open this picture (the file is damaged or not an image format I can read). "
        "Please send it again as a JPG or PNG.",
    },
    "media.image_too_big": {
        "zh-CN": "抱歉，这张图片太大，压缩到 {limit_mb} MB 以内也看不清了。请裁剪或缩小后再发。",
        "en": "Sorry, this picture is too big to bring under {limit_mb} MB while staying legible. "
        "Please crop or shrink it and send it again.",
    },
    "media.save_failed": {
        "zh-CN": "抱歉，这个{what}没能保存下来，请稍后再发一次。",
        "en": "Sorry, I could not save this {what}; please send it again in a moment.",
    },
    "media.model_cannot_see_images": {
        "zh-CN": "当前使用的模型看不了图片，我只告诉了它图片保存在哪里。",
        "en": "The model in use cannot view pictures; it was only told where the picture is saved.",
    },
    "media.what.image": {"zh-CN": "图片", "en": "picture"},
    "media.what.file": {"zh-CN": "文件", "en": "file"},
}
