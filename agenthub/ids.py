"""Ids that only need to be unique (log references, local message ids), made without a system call."""

from __future__ import annotations

import os
import random
import uuid

_random = random.Random()  # seeded from the OS once, at import
os.register_at_fork(after_in_child=_random.seed)  # a forked child must not repeat its parent's ids


def unique_hex() -> str:
    """A random 128-bit id as 32 hex digits, unique but not a secret: `uuid.uuid4()` reads `os.urandom`, a system
    call that lets go of the GIL, and on a busy event loop taking it back waits for whatever worker thread has it."""
    return f"{_random.getrandbits(128):032x}"


def unique_uuid4() -> str:
    """`unique_hex` in the text form of a version-4 UUID."""
    return str(uuid.UUID(int=_random.getrandbits(128), version=4))
