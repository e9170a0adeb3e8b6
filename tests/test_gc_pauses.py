"""cadence/gc_pauses.py: the start-up heap frozen out of the collector's walks, and collections
counted and timed by the hook (the served check of both processes is in test_server_api.py)."""

from __future__ import annotations

import gc

from cadence.gc_pauses import GcPauses, freeze_startup_heap


def test_freezing_moves_the_live_heap_out_of_collections():
    kept = [[i] for i in range(5000)]  # live containers the collector would walk
    try:
        frozen = freeze_startup_heap()
        assert frozen == gc.get_freeze_count() >= len(kept)
        assert all(not any(o is k for o in gc.get_objects(2)) for k in kept[:3])  # not in any generation
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_every_collection_is_counted_and_timed_until_uninstalled():
    other = GcPauses().install()  # another hook, equal in every count: never taken for this one
    pauses = GcPauses().install()
    try:
        assert pauses.install() is pauses and sum(c is pauses for c in gc.callbacks) == 1  # installing twice hooks once
        for _ in range(3):
            gc.collect()
        assert pauses.collections >= 3
        assert 0 < pauses.longest_seconds <= pauses.seconds
    finally:
        pauses.uninstall()
    counted = pauses.collections
    gc.collect()
    assert pauses.collections == counted and not any(c is pauses for c in gc.callbacks)
    assert any(c is other for c in gc.callbacks) and other.collections > counted
    other.uninstall()


def test_metrics_report_both_processes_before_the_engine_first_reports():
    """/metrics has both processes' series from the start, at 0, so a reading taken as the server
    turns ready (before the engine's first stats arrive) can be compared with a later one; the
    engine's stats then set its series."""
    from prometheus_client.parser import text_string_to_metric_families

    from cadence.engine import protocol as P
    from cadence.engine.request import EngineStats
    from cadence.server.metrics import Metrics

    def gc_samples(metrics: Metrics) -> dict[tuple[str, str], float]:
        families = text_string_to_metric_families(metrics.render().decode())
        return {(s.name, s.labels["process"]): s.value for f in families for s in f.samples if "process" in s.labels}

    metrics = Metrics()
    fresh = gc_samples(metrics)
    for process in ("engine", "api"):
        assert fresh[("cadence_gc_collections", process)] == 0
        assert fresh[("cadence_gc_longest_pause_seconds", process)] == 0
    metrics.on_step(P.StepOutput([], EngineStats(gc_collections=3, gc_seconds=0.01, gc_longest_seconds=0.004), False))
    reported = gc_samples(metrics)
    assert reported[("cadence_gc_collections", "engine")] == 3
    assert reported[("cadence_gc_longest_pause_seconds", "engine")] == 0.004
