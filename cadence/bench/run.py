"""The bench's Python API: a BenchConfig in, a BenchResult (and its files) out."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from .client import ServerConfig
from .environment import collect_environment
from .load import LoadConfig
from .metrics import AudibleRule
from .plots import MISSING_MESSAGE, have_matplotlib, write_plots
from .progress import ProgressBoard
from .report import BenchResult, write_requests_csv, write_results_json
from .trials import run_trials
from .workload import load_workload


@dataclass
class WorkloadSpec:
    kind: str = "builtin"  # builtin | seed-tts | text
    path: str | None = None  # seed-tts: meta.lst or its directory; text: the file
    language: str | None = None  # ISO code of a seed-tts/text source (seed-tts guesses from en/ or zh/)
    languages: list[str] | None = None  # builtin: keep only these ISO codes
    limit: int | None = None  # keep the first N utterances


@dataclass
class BenchConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    audible: AudibleRule = field(default_factory=AudibleRule)
    output_dir: Path | None = None  # None: write nothing
    label: str | None = None  # a name for this run in tables and `compare`
    plots: bool = True
    progress: bool = False  # live progress bars (the CLI turns them on)

    def to_json(self) -> dict[str, Any]:
        """The config as results.json records it: the API key is never written."""
        data = asdict(self)
        data["server"]["api_key"] = "<redacted>" if self.server.api_key else None
        data["output_dir"] = str(self.output_dir) if self.output_dir is not None else None
        return data


def run_bench(config: BenchConfig, console: Console | None = None, argv: list[str] | None = None) -> BenchResult:
    """Load the workload, run every trial, and write the outputs if `config.output_dir` is set."""
    config.load.validate()
    w = config.workload
    utterances = load_workload(w.kind, w.path, w.language, w.languages, w.limit)
    environment = collect_environment(config.server, argv)
    board = ProgressBoard(enabled=config.progress, console=console)
    trials = run_trials(config.server, utterances, config.load, config.audible, board)
    result = BenchResult(config.to_json(), environment, trials, config.label)
    if config.output_dir is not None:
        write_outputs(result, Path(config.output_dir), config.plots, console)
    return result


def write_outputs(result: BenchResult, out_dir: Path, plots: bool = True, console: Console | None = None) -> list[Path]:
    """results.json, requests.csv and (if matplotlib is there) the plots; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [
        write_results_json(result, out_dir / "results.json"),
        write_requests_csv(result.trials, out_dir / "requests.csv"),
    ]
    if plots:
        if have_matplotlib():
            files += write_plots(result.trials, result.points(), out_dir)
        else:
            (console or Console(stderr=True)).print(MISSING_MESSAGE, markup=False)  # [bench] is not a style
    result.files = files
    return files
