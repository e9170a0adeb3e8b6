"""A live progress display for trials (rich), and a silent stand-in for tests and scripts."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_COUNTS = "ok [green]{task.fields[ok]}[/] failed [red]{task.fields[failed]}[/] in flight {task.fields[inflight]}"


class TrialProgress:
    """Counts for one trial; the silent base class only counts."""

    def __init__(self) -> None:
        self.ok = self.failed = self.inflight = 0

    def sent(self) -> None:
        self.inflight += 1
        self._show(advance=0)

    def finished(self, ok: bool) -> None:
        self.inflight -= 1
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        self._show(advance=1)

    def close(self) -> None:
        pass

    def _show(self, advance: int) -> None:
        pass


class ProgressBoard:
    """One bar per trial. `enabled=False` (or a non-terminal stdout with rich's defaults) shows nothing."""

    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self._progress: Progress | None = None
        if enabled:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(_COUNTS),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )

    def __enter__(self) -> ProgressBoard:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def trial(self, description: str, total: int | None) -> TrialProgress:
        """A counter for one trial; `total` None when it is bounded by time rather than count."""
        if self._progress is None:
            return TrialProgress()
        return _RichTrial(self._progress, self._progress.add_task(description, total=total, ok=0, failed=0, inflight=0))


class _RichTrial(TrialProgress):
    def __init__(self, progress: Progress, task: TaskID):
        super().__init__()
        self._progress, self._task = progress, task

    def _show(self, advance: int) -> None:
        self._progress.update(self._task, advance=advance, ok=self.ok, failed=self.failed, inflight=self.inflight)

    def close(self) -> None:
        done = self.ok + self.failed
        self._progress.update(self._task, total=done, completed=done, inflight=self.inflight)
