"""`cadence bench`: a load generator and report for any OpenAI-compatible /v1/audio/speech server.

Python API: build a BenchConfig (server, load, workload), call run_bench(), read the BenchResult or the
files it wrote. See docs/bench.md for every metric's definition. Names are imported on first use so
that `cadence`'s argument parser (which imports cadence.bench.cli) stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AudibleRule": "metrics",
    "BenchConfig": "run",
    "BenchResult": "report",
    "LoadConfig": "load",
    "ServerConfig": "client",
    "WorkloadSpec": "run",
    "run_bench": "run",
    "write_outputs": "run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
