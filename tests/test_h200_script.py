"""benchmarks/h200.sh, the script every device call runs, and h200_past.sh, the past sessions'
phases it dispatches to: both parse, no phase is named in both, and a phase neither names is an
error (a typo in a device call should cost seconds of the session's device time, not a silent
empty call)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = [BENCH / "h200.sh", BENCH / "h200_past.sh"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def phases(script: Path) -> set[str]:
    return set(re.findall(r"^    ([a-z0-9_]+)\)", script.read_text(), flags=re.M))


def test_the_scripts_parse_and_name_each_phase_once():
    for script in SCRIPTS:
        subprocess.run(["bash", "-n", str(script)], check=True)
    live, past = (phases(s) for s in SCRIPTS)
    assert {"walkab", "walks", "stamps142", "screen144"} <= live
    assert {"attn104", "look129", "cp136", "screen139", "norm141", "screen143"} <= past
    assert not live & past


def test_an_unknown_phase_is_an_error(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    run = subprocess.run(["bash", str(SCRIPTS[0]), "no_such_phase"], env=env, capture_output=True, text=True,
                         cwd=BENCH.parent, timeout=120)  # fmt: skip
    assert run.returncode == 2 and "no phase 'no_such_phase'" in run.stderr
