"""The Python API as docs/python.md shows it: its blocks run as written, in order, in one directory."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
import torch
from conftest import REPO

DOC = REPO / "docs" / "python.md"
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.S)


def test_the_package_exports_the_engine_without_loading_it_on_import():
    code = (
        "import sys, cadence\n"
        "assert 'torch' not in sys.modules and 'cadence.engine.engine' not in sys.modules\n"
        "from cadence import Engine, SynthesisRequest\n"
        "from cadence.models.qwen3_tts.frontend import SynthesisRequest as S\n"
        "from cadence.pretrained import Engine as E\n"
        "assert (Engine, SynthesisRequest) == (E, S)\n"
        "assert set(cadence.__all__) == set(cadence._EXPORTS) | {'__version__'}\n"
        "for name in cadence.__all__:\n"
        "    getattr(cadence, name)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    import cadence

    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        cadence.Nothing  # noqa: B018


def test_the_documented_example_runs(tmp_path, monkeypatch):
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert [kind for kind, _ in blocks].count("python") >= 3
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(torch.get_num_threads())}
    namespace: dict = {"__name__": "docs_python_md"}
    for kind, text in blocks:
        if kind == "bash":
            for line in text.strip().splitlines():
                argv = shlex.split(line)
                assert argv[0] == "cadence", line  # the page's shell lines are cadence commands
                r = subprocess.run(
                    [sys.executable, "-m", "cadence.cli", "-q", *argv[1:]],
                    capture_output=True, text=True, timeout=300, env=env,
                )  # fmt: skip
                assert r.returncode == 0, r.stderr
        elif text.strip() != "from cadence import Engine, SynthesisRequest":  # the import alone, shown first
            exec(compile(text, str(DOC), "exec"), namespace)  # noqa: S102
    utterance = namespace["utterance"]
    assert utterance.frames >= 1 and (tmp_path / "hello.wav").stat().st_size == 44 + utterance.pcm.nbytes
    assert namespace["first"].size > 0 and namespace["second"].size > 0
    assert namespace["cloned"].frames >= 1
