"""Start-up objects kept out of the cyclic garbage collector's full collections once the daemon has loaded."""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger(__name__)


def freeze_start_up_objects() -> None:
    """Move every object alive now (the modules, the SDK and its models, the configuration: some 200 000 objects,
    kept for the process's life) to the collector's permanent generation: a full collection no longer walks them
    (each walk held the event loop ~0.14 s in bench_http). Not collected from here on; what start-up left as
    garbage in a cycle stays, once."""
    gc.freeze()
    log.debug("gc_start_up_objects_frozen", count=gc.get_freeze_count())
