"""benchmarks/gpu.sh, the GPU side of docs/benchmarks.md, checked on the CPU: it parses, every phase
its help documents has a body and every body is documented, the docs name only phases that exist, a
misspelt phase fails before anything runs, and benchmarks/ab_table.py (which tabulates the `ab`
phase) compares trees as documented."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu.sh"

sys.path.insert(0, str(REPO / "benchmarks"))
import ab_table  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def documented_phases() -> dict[str, int | None]:
    """The phases of the script's help (its header comment) and how many arguments each takes (None:
    all the rest)."""
    help_text = run("help")
    assert help_text.returncode == 0, help_text.stderr
    phases = {}
    for name, args, rest in re.findall(r"^  ([a-z]+)((?: [A-Z]+)*)( \[[A-Z]+ \.\.\.\])?  ", help_text.stdout, re.M):
        phases[name] = None if rest else len(args.split())
    return phases


def test_the_script_parses():
    assert shutil.which("bash"), "bash is needed to run benchmarks/gpu.sh"
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_documented_phase_has_a_body_and_every_body_is_documented():
    phases = documented_phases()
    assert {"decode", "codec", "load", "baselines", "sweep", "scaleout", "tiles", "ab", "help"} <= set(phases)
    assert phases["serve"] == 1 and phases["protocol"] == 1 and phases["ab"] is None
    source = SCRIPT.read_text()
    bodies = set(re.findall(r"^phase_([a-z]+)\(\)", source, flags=re.M))
    assert bodies == set(phases) - {"help"}
    arity = re.search(r"arity_of\(\) \{.*?\n\}", source, flags=re.S).group(0)
    for phase in phases:  # the argument check knows every phase
        assert re.search(rf"[\s|]{phase}[\s|)]", arity), phase


def test_the_docs_name_only_phases_that_exist():
    phases = documented_phases()
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    commands = [
        (doc.name, m.group(1).split())
        for doc in docs
        for m in re.finditer(r"bash benchmarks/gpu\.sh ([^`#\n]*)", doc.read_text())
    ]
    assert any(doc == "benchmarks.md" for doc, _ in commands), "docs/benchmarks.md gives no gpu.sh command"
    for doc, words in commands:
        if words[0].isupper():  # a placeholder: `bash benchmarks/gpu.sh PHASE`
            continue
        while words:
            phase, words = words[0], words[1:]
            assert phase in phases, f"{doc}: gpu.sh has no phase {phase!r}"
            arity = phases[phase]
            assert len(words) >= (1 if arity is None else arity), f"{doc}: gpu.sh {phase} lacks its argument"
            words = [] if arity is None else words[arity:]
    texts = "".join(doc.read_text() for doc in docs)
    assert "h200.sh" not in texts and ".ref/" not in SCRIPT.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [(["decode", "nosuchphase"], "no phase 'nosuchphase'"), (["serve"], "serve needs 1"), (["ab"], "at least one")],
)
def test_a_bad_phase_list_fails_before_anything_runs(args, message, tmp_path):
    env = {"OUT": str(tmp_path), "PATH": os.environ["PATH"]}
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "gpu.log").exists()  # nothing ran, not even nvidia-smi


def engine_steps_result(decode: dict[int, float], prefill_ms: float) -> dict:
    return {
        "decode": [{"batch": b, "back_to_back_ms": ms} for b, ms in decode.items()],
        "prefill": [{"prompt_tokens": 70, "prefill_plus_first_frame_ms": prefill_ms}],
    }


def test_the_ab_table_compares_each_tree_with_the_first(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for round_, delta in (("1", 0.0), ("2", 0.02)):
        this = engine_steps_result({1: 2.00 + delta, 64: 4.00 + delta}, 3.0)
        base = engine_steps_result({1: 2.10 + delta, 64: 4.00 + delta}, 3.3)
        (runs / f"this_{round_}.json").write_text(json.dumps(this))
        (runs / f"main_base_{round_}.json").write_text(json.dumps(base))
    merged = tmp_path / "ab.json"
    assert ab_table.main([str(runs), "--json", str(merged)]) == 0
    text = ab_table.table(ab_table.load_runs(runs), ["this"])
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()}
    assert "| this (rounds) | this | main_base (rounds) | main_base |" in text.splitlines()[0]
    assert "2.000, 2.020 | 2.010 | 2.100, 2.120 | 2.110 (+5.0 %)" in lines["decode, batch 1"]
    assert "4.010 (+0.0 %)" in lines["decode, batch 64"]
    assert "3.300 (+10.0 %)" in lines["prefill + first frame, 70 tokens"]
    assert sorted(json.loads(merged.read_text())) == ["main_base_1", "main_base_2", "this_1", "this_2"]
