"""The checks of this machine: the data directory (writable, its lock, free space) and the HTTP port."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
from pathlib import Path

from agenthub.config import Settings
from agenthub.doctor import Check, fail, ok, warn
from agenthub.hosting.datalock import LOCK_NAME, holder_address, holder_role, is_daemon, is_locked, read_holder

LOW_SPACE_BYTES = 1 << 30
"""Under 1 GiB free: a warning (histories, archives and the search index grow)."""
NO_SPACE_BYTES = 100 << 20
"""Under 100 MiB free: a failure (writes will soon be refused)."""


def _existing_parent(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def data_dir_checks(settings: Settings) -> list[Check]:
    """Writable (or creatable), held by a running daemon or free, and how much room is left."""
    data = settings.data_dir.resolve()
    where = _existing_parent(data)
    checks: list[Check] = []
    try:
        if data.exists():
            with tempfile.NamedTemporaryFile(dir=data, prefix=".doctor-", delete=True):
                pass
        elif not os.access(where, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", str(where))
        checks.append(ok("data dir", f"{data} is writable" if data.exists() else f"{data} will be created"))
    except OSError as e:
        hint = "set data_dir (AGENTHUB_DATA_DIR) to a directory this user may write, or fix its permissions"
        checks.append(fail("data dir", f"{data}: {e.strerror or e}", hint))
    holder = read_holder(data / LOCK_NAME) if data.exists() and is_locked(data) else None
    if holder is not None and not is_daemon(holder):
        checks.append(ok("data lock", f"held by `agenthub {holder_role(holder)}` ({holder}) until it ends"))
    elif holder is not None:
        address = holder_address(data)
        at = f" (HTTP on {address})" if address else ""
        checks.append(ok("data lock", f"held by a running daemon{at}; `agenthub chat` will connect to it"))
    else:
        checks.append(ok("data lock", "free: no daemon runs on this data dir"))
    free = shutil.disk_usage(where).free
    shown = f"{free / (1 << 30):.1f} GiB free on {where}"
    if free < NO_SPACE_BYTES:
        checks.append(fail("disk space", shown, "free some space: writes will be refused"))
    elif free < LOW_SPACE_BYTES:
        checks.append(warn("disk space", shown, "less than 1 GiB left; histories and archives grow"))
    else:
        checks.append(ok("disk space", shown))
    return checks


HOST_HINT = (
    "set http.host in agenthub.toml / AGENTHUB_HTTP__HOST to an address of this machine (127.0.0.1, or 0.0.0.0 for all)"
)


def _host_refused(error: OSError) -> bool:
    return isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL


def _bind_reason(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return "the host name does not resolve"
    if error.errno == errno.EADDRNOTAVAIL:
        return "not an address of this machine"
    return "already in use" if error.errno == errno.EADDRINUSE else (error.strerror or str(error))


def _bind_hint(error: OSError) -> str:
    if _host_refused(error):
        return HOST_HINT
    return "stop what uses it, or set http.port in agenthub.toml / AGENTHUB_HTTP__PORT"


def port_check(settings: Settings) -> Check:
    """Whether `http.host:http.port` can be listened on (or is the running daemon's own)."""
    http = settings.http
    where = f"{http.host}:{http.port}"
    if not http.enabled:
        return ok("http port", "the HTTP server is disabled ([http] enabled = false)")
    data = settings.data_dir
    if data.exists() and is_locked(data) and holder_address(data) == where:
        return ok("http port", f"{where} is the running daemon's")
    family = socket.AF_INET6 if ":" in http.host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((http.host, http.port))
        except OSError as e:
            return fail("http port", f"{where}: {_bind_reason(e)}", _bind_hint(e))
    return ok("http port", f"{where} is free")
