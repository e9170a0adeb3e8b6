"""The weight prefetcher (cadence/kernels/weight_prefetch.py): its settings, the schedule a walk's
GEMMs record and the table it commits (CPU), and on a GPU ("gpu" marker) the kernel beside a
captured GEMM chain (the same bits as without it) and its bound on waiting for a chain that never
reports. test_fast_step.py runs the decode walk with it."""

from __future__ import annotations

import pytest
import torch

from cadence.kernels import weight_prefetch
from cadence.kernels.weight_prefetch import PrefetchSettings, WeightSchedule, track, weight_range

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
requires_hopper = pytest.mark.skipif(not HOPPER, reason="the bulk prefetch needs a GPU of compute capability >= 9")


def test_settings_from_the_environment(monkeypatch):
    for var in ("CADENCE_WEIGHT_PREFETCH", "CADENCE_WEIGHT_PREFETCH_PROGRAMS"):
        monkeypatch.delenv(var, raising=False)
    assert not PrefetchSettings.from_env().enabled  # off unless asked for
    monkeypatch.setenv("CADENCE_WEIGHT_PREFETCH", "16")
    assert PrefetchSettings.from_env() == PrefetchSettings(16 * 2**20, PrefetchSettings.programs)
    monkeypatch.setenv("CADENCE_WEIGHT_PREFETCH_PROGRAMS", "8")
    assert PrefetchSettings.from_env() == PrefetchSettings(16 * 2**20, 8)
    monkeypatch.setenv("CADENCE_WEIGHT_PREFETCH", "lots")
    with pytest.raises(ValueError, match="a number expected"):
        PrefetchSettings.from_env()
    with pytest.raises(ValueError, match="programs >= 1"):
        PrefetchSettings(2**20, 0)


def test_weight_range_covers_the_tensor_on_16_byte_bounds():
    base = torch.zeros(4096, dtype=torch.bfloat16)
    view = base[3:1003]  # starts 6 bytes in, 2000 bytes long
    start, size = weight_range(view)
    first, last = view.data_ptr(), view.data_ptr() + 2000
    assert start % 16 == 0 and size % 16 == 0
    assert start <= first and last <= start + size and size < 2000 + 32
    assert weight_range(base) == (base.data_ptr(), 8192)
    with pytest.raises(ValueError, match="contiguous"):
        weight_range(base.view(64, 64).t())


def test_a_schedule_records_its_gemms_weights_in_order_and_commits_them_as_units(monkeypatch):
    monkeypatch.setattr(weight_prefetch, "UNIT_BYTES", 8192)  # so that the middle weight takes two units
    weights = [torch.zeros(n, 64, dtype=torch.bfloat16) for n in (32, 96, 32)]
    schedule = WeightSchedule(torch.device("cpu"), PrefetchSettings(2**20))
    assert track(weights[0]) is None  # nothing records: GEMMs report nothing
    with schedule.recording():
        tracked = [track(w) for w in weights + [weights[0]]]  # a weight read twice is two entries
        with (
            pytest.raises(RuntimeError, match="do not nest"),
            WeightSchedule(torch.device("cpu"), schedule.settings).recording(),
        ):
            pass
    assert track(weights[0]) is None
    # each GEMM reports the KB of the schedule before its weight (4, 12, 4, 4 KB weights)
    assert [t.offset_kb for t in tracked] == [0, 4, 16, 20] and all(t.progress is schedule.progress for t in tracked)
    schedule.commit()
    a, b, c = (w.data_ptr() for w in weights)
    units = [(a, 4096, 4), (b, 8192, 12), (b + 8192, 4096, 16), (c, 4096, 20), (a, 4096, 24)]  # (start, bytes, end KB)
    assert [tuple(r) for r in schedule.table[:5].tolist()] == units
    assert int(schedule.count) == 5 and not schedule.table[5:].any()


def test_wrap_records_each_run_and_commits_outside_capture():
    w1, w2 = torch.zeros(16, 16), torch.zeros(32, 16)
    schedule = WeightSchedule(torch.device("cpu"), PrefetchSettings(2**20))
    order = [w1, w2]
    run = schedule.wrap(lambda: [track(w) for w in order] and "out")
    assert run() == "out" and schedule.committed == [weight_range(w1), weight_range(w2)]
    order = [w2]
    run()  # the next run's list replaces the last one's
    assert schedule.committed == [weight_range(w2)] and int(schedule.count) == 1


def test_a_schedule_holds_at_most_max_units(monkeypatch):
    monkeypatch.setattr(weight_prefetch, "MAX_UNITS", 2)
    schedule = WeightSchedule(torch.device("cpu"), PrefetchSettings(2**20))
    run = schedule.wrap(lambda: [track(torch.zeros(8)) for _ in range(3)])
    with pytest.raises(RuntimeError, match="streams 3 units of weights, the table holds 2"):
        run()


# -- on the GPU ---------------------------------------------------------------------------------


def _chain(x, weights):
    from cadence.kernels import triton_ops

    for w_up, w_down in weights:
        x = triton_ops.linear(triton_ops.linear(x, w_up), w_down)
    return x


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("programs", [1, 32])
@pytest.mark.parametrize("rows", [1, 16])
def test_a_captured_chain_with_the_prefetcher_gives_the_same_bits(programs, rows):
    from cadence.engine.graphs import capture
    from cadence.kernels import triton_ops

    g = torch.Generator(device="cuda").manual_seed(1)
    shapes = ((2048, 512), (512, 2048))
    weights = [tuple(torch.randn(s, device="cuda", generator=g).bfloat16() * 0.05 for s in shapes) for _ in range(12)]
    x = torch.randn(rows, 512, device="cuda", generator=g).bfloat16()
    previous = triton_ops.use_pdl(True)
    try:
        pool = torch.cuda.graph_pool_handle()
        plain, out_plain = capture(lambda: _chain(x, weights), x.device, pool)
        schedule = WeightSchedule(x.device, PrefetchSettings(2**20, programs))  # 1 MB ahead: paced all along
        paced, out_paced = capture(schedule.wrap(lambda: _chain(x, weights)), x.device, pool)
        assert len(schedule.committed) == 24 and int(schedule.count) == 24
        for _ in range(3):
            plain.replay()
            paced.replay()
        torch.cuda.synchronize()
        assert torch.equal(out_paced, out_plain)
        assert int(schedule.progress) == 23 * 2048  # KB before the last GEMM's weight: 23 weights of 2 MB
    finally:
        triton_ops.use_pdl(previous)


@pytest.mark.gpu
@requires_hopper
def test_the_prefetcher_stops_waiting_for_a_chain_that_never_reports():
    weights = [torch.zeros(256, 1024, dtype=torch.bfloat16, device="cuda") for _ in range(6)]
    schedule = WeightSchedule(torch.device("cuda"), PrefetchSettings(4096, 2))  # 4 KB: every unit waits
    with schedule.recording():
        for w in weights:
            track(w)
    schedule.commit()
    schedule.progress.fill_(0)  # no GEMM ever reports: only the spin bound lets it finish
    weight_prefetch.launch_prefetcher(schedule, max_spins=1000)
    torch.cuda.synchronize()
