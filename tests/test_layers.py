"""The layers of cadence/, read from the source with `ast`: every import counts, at module level,
inside functions and under TYPE_CHECKING.

- the engine knows models only through the partition contract: nothing under cadence/engine/
  imports cadence.models;
- the server knows a model only through its frontend: nothing under cadence/server/ imports a model
  package (cadence.models.qwen3_tts), only the registry and the family-agnostic interfaces;
- kernels are below the engine: nothing under cadence/kernels/ imports cadence.engine;
- no import cycles (an edge goes to the longest cadence module the import names; a package's
  __init__ running before its submodules is not an edge);
- the API process imports no torch and no triton (subprocesses, one a module it loads).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "cadence"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = source_modules()


def _resolve(name: str) -> str | None:
    """The longest cadence module that `name` (a dotted import target) starts with."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(module: str) -> dict[str, int]:
    """The cadence modules `module` imports (anywhere in its source), each with a line that does."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            # `from pkg import name`: the submodule pkg.name where there is one, else pkg itself
            targets = [f"{stem}.{alias.name}" for alias in node.names]
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                out.setdefault(resolved, node.lineno)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def _edges(source_prefix: str, target_prefix: str) -> list[str]:
    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return [
        f"{m} -> {t} (line {line})"
        for m, targets in GRAPH.items()
        if under(m, source_prefix)
        for t, line in targets.items()
        if under(t, target_prefix)
    ]


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (the import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def describe(components: list[list[str]]) -> str:
    lines = []
    for component in components:
        lines.append("cycle: " + ", ".join(component))
        lines += [f"  {m} -> {t} (line {GRAPH[m][t]})" for m in component for t in GRAPH[m] if t in component]
    return "\n".join(lines)


def test_the_walk_sees_the_package():
    """The test's own premise: it finds the layers and their known edges."""
    assert {"cadence.engine.core", "cadence.models.registry", "cadence.server.api"} <= MODULES.keys()
    assert "cadence.engine.partition" in GRAPH["cadence.engine.core"]
    assert "cadence.models.registry" in GRAPH["cadence.models"]  # `from .registry import register`
    assert "cadence.engine.protocol" in GRAPH["cadence.server.metrics"]  # `from ..engine import protocol`
    assert strongly_connected({"a": {"b": 1}, "b": {"a": 2}, "c": {"a": 3}}) == [["a", "b"]]


def test_the_engine_imports_no_model_package():
    assert _edges("cadence.engine", "cadence.models") == []


def test_the_server_imports_no_model_package():
    """cadence.models' own modules (registry, interfaces) are the server's only way to a model."""
    packages = sorted({m.split(".")[2] for m in MODULES if m.count(".") >= 3 and m.startswith("cadence.models.")})
    assert "qwen3_tts" in packages  # the test's premise
    assert [e for p in packages for e in _edges("cadence.server", f"cadence.models.{p}")] == []
    assert {"cadence.models.interfaces", "cadence.models.registry"} <= {
        t for m in GRAPH if m.startswith("cadence.server.") for t in GRAPH[m]
    }


def test_the_kernels_import_nothing_of_the_engine():
    assert _edges("cadence.kernels", "cadence.engine") == []


def test_no_import_cycles():
    """No cycle among cadence's modules, counting imports inside functions and under TYPE_CHECKING."""
    cycles = strongly_connected(GRAPH)
    assert not cycles, describe(cycles)


# The API process: HTTP, validation and tokenising, the engine client; what it imports must not load
# torch (seconds of start-up and hundreds of MB for nothing) or triton.
API_PROCESS_MODULES = [
    "cadence.server.api",
    "cadence.server.cli",
    "cadence.engine.client",
    "cadence.engine.replicas",
    "cadence.models.registry",
    "cadence.models.interfaces",
    "cadence.models.qwen3_tts.frontend",
    "cadence.deploy.config",
]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.mark.parametrize("module", API_PROCESS_MODULES)
def test_an_api_process_module_loads_no_torch(module):
    r = _run(f"""
        import sys
        import {module}
        loaded = [m for m in ("torch", "triton") if m in sys.modules]
        assert not loaded, f"{module} loads {{loaded}}"
    """)
    assert r.returncode == 0, r.stderr


def test_the_api_process_validates_a_request_without_torch():
    """A CustomVoice frontend of the built-in architecture (as `--dummy-weights` builds it) turns a
    speech body into the engine's request, and the engine client's protocol encodes it: no torch."""
    r = _run("""
        import sys
        from cadence.engine import protocol
        from cadence.models import registry
        from cadence.server.schema import Limits, SpeechBody, validate_speech
        from cadence.server.voices import VoiceTable

        source = registry.model_source("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", random_preset="tiny")
        frontend = registry.load_frontend(source)
        assert frontend.config.tts_model_type == "custom_voice"
        limits = Limits(4096, 4096, ("tts-1",))
        job = validate_speech(SpeechBody(input="Hello from cadence.", voice="ryan"), frontend,
                              VoiceTable(frontend.config.speakers), limits)
        request = job.request
        assert len(request.prompt) > 0 and request.params.seed is not None
        assert protocol.encode(protocol.Submit(request))
        loaded = [m for m in ("torch", "triton") if m in sys.modules]
        assert not loaded, f"loaded {loaded}"
    """)
    assert r.returncode == 0, r.stderr


def _loaded_libraries(pid: int) -> set[str]:
    """The shared objects mapped into a process (Linux /proc)."""
    return {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if line.count(" ") >= 5}


def test_a_serving_api_process_has_no_torch_loaded(tiny_checkpoint, tmp_path):
    """A real `cadence serve` of a CustomVoice checkpoint answers a speech request; its API process
    has never loaded torch (its engine process has)."""
    from serving import Server, pcm_samples

    server = Server(tiny_checkpoint, tmp_path).wait_ready()
    try:
        with server.client() as c:
            r = c.post("/v1/audio/speech", json={"input": "Hello.", "voice": "ryan", "max_new_tokens": 4})
        assert r.status_code == 200 and pcm_samples(r.content).size > 0, r.text
        engine = server.engine_pid()

        def torch_libraries(pid: int) -> list[str]:
            return sorted(p for p in _loaded_libraries(pid) if "/torch/" in p or "/triton/" in p)

        assert torch_libraries(engine), "test premise: the engine process has torch loaded"
        assert torch_libraries(server.proc.pid) == []
    finally:
        server.stop()
