"""Every trial of a bench run, in order: each in this process, or an open-loop one dealt over client
processes (processes.py) where the load asks for more than one."""

from __future__ import annotations

import asyncio

from .client import ServerConfig
from .load import LoadConfig, Trial, expected_requests, run_trial
from .metrics import AudibleRule
from .processes import ClientProcesses
from .progress import ProgressBoard
from .workload import Utterance


def run_trials(
    server: ServerConfig,
    utterances: list[Utterance],
    load: LoadConfig,
    rule: AudibleRule | None = None,
    board: ProgressBoard | None = None,
) -> list[Trial]:
    """Every (load point, seed) trial in order: points as given (closed loop first), seeds inner. Open-loop
    trials run on `load.client_processes` processes where that is more than one; closed loops in this one."""
    load.validate()
    if not utterances:
        raise ValueError("the workload holds no utterances")
    rule = rule or AudibleRule()
    board = board or ProgressBoard(enabled=False)
    trials = []
    with board, ClientProcesses(load.client_processes) as processes:
        for point in load.points():
            for seed in load.seeds:
                progress = board.trial(f"{point.label} seed {seed}", expected_requests(point, load, seed))
                if point.mode == "open" and processes.count > 1:
                    trial = processes.run_trial(server, utterances, load, point, seed, rule, progress)
                else:
                    trial = asyncio.run(run_trial(server, utterances, load, point, seed, rule, progress))
                trials.append(trial)
    return trials
