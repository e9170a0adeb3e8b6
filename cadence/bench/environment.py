"""What a published number needs beside it: the client machine, the tool's version, what the server said."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

from .client import ServerConfig

PROBE_TIMEOUT_S = 5.0


def collect_environment(server: ServerConfig, argv: list[str] | None = None) -> dict[str, Any]:
    return {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        # the program by name only: an absolute path would record the machine's directory layout
        "command": [Path(a).name if i == 0 else a for i, a in enumerate(argv if argv is not None else sys.argv)],
        "client": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            # A busy client inflates every latency it measures; a high load average is a warning sign.
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "versions": {name: _version(name) for name in ("cadence", "httpx", "numpy", "rich", "matplotlib")},
        "bench_source": _git_state(Path(__file__).resolve().parent),
        "server": probe_server(server),
    }


def probe_server(server: ServerConfig) -> dict[str, Any]:
    """GET /v1/models (the OpenAI listing most servers offer) to record what was being measured."""
    url = server.base_url.rstrip("/") + "/v1/models"
    try:
        response = httpx.get(url, headers=server.headers(), timeout=PROBE_TIMEOUT_S, trust_env=False)
    except httpx.HTTPError as e:
        return {"url": url, "error": repr(e)}
    info: dict[str, Any] = {"url": url, "status": response.status_code, "server_header": response.headers.get("server")}
    if response.status_code == 200:
        try:
            info["models"] = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            info["models"] = None
    return info


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_state(directory: Path) -> dict[str, Any] | None:
    """Commit and dirtiness of the checkout the bench runs from, if it is one."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", str(directory)],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "bench_files_modified": bool(dirty)}
