"""benchmarks/continuous_input.py end to end on the CPU: it starts a real `cadence serve` on the tiny
checkpoint, speaks its text in both input modes with a simulated LLM writer and writes its table."""

from __future__ import annotations

import json
import subprocess
import sys

from serving import REPO, free_port


def test_the_benchmark_compares_both_input_modes(tiny_checkpoint, tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "continuous_input.py"), "--checkpoint", str(tiny_checkpoint)]
    cmd += ["--device", "cpu", "--rates", "100", "--sessions", "1", "--port", str(free_port()), "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    sessions = json.loads((tmp_path / "continuous.json").read_text())
    assert sorted(s["mode"] for s in sessions) == ["continuous", "sentence"]
    for s in sessions:
        assert s["first_audio_ms"] > 0 and s["audio_s"] > 0
        assert s["after_first_word_ms"] < s["first_audio_ms"]
    table = (tmp_path / "continuous.md").read_text()
    assert "| 100 | sentence |" in table and "| 100 | continuous |" in table
