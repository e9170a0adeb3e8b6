"""The CUDA code predictor (cadence/kernels/cuda/code_predictor.cu) run on the CPU through
tests/cuda_emulation (every CUDA thread a cooperative fiber), against the fused walk's layer path
(PyTorch ops), from the same talker hidden states and code0s: the same codes, greedy and sampled.

This checks the kernel's logic without a GPU: indexing, the order of its phases, the weight ring's
protocol between producer and consumers, the arithmetic and rounding. One OS thread runs every
fiber, so memory ordering on a GPU is not checked here; test_kernels.py's gpu tests run the kernel
on the device.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from cadence.engine.engine import build_core
from cadence.engine.rng import U_MAX
from cadence.engine.sampler import RowParams
from cadence.kernels.code_predictor_buffers import STAMPS, CodePredictorBuffers, phases
from cadence.kernels.cuda_code_predictor import SAMPLER_WORDS, SOURCE, KernelPlan, kernel_arguments, use_words
from cadence.models.qwen3_tts import Qwen3TTS

from test_engine import config

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the CPU emulation")
EMULATION = Path(__file__).parent / "cuda_emulation"
SHARED_MEMORY = 227 * 1024  # an H200's per-block limit, so the ring has the GPU's stage count


@pytest.fixture(scope="module")
def model(tiny_checkpoint) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "fp32")


@pytest.fixture(scope="module")
def model_bf16(tiny_checkpoint) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "bf16")


BUILT: dict[tuple, Path] = {}  # one build per set of compile-time constants


def build(plan: KernelPlan, out: Path) -> Path:
    if plan.defines in BUILT:
        return BUILT[plan.defines]
    exe = out / "driver"
    flags = [f"-D{name}={value}" for name, value in plan.defines]
    cmd = ["g++", "-std=c++20", "-O1", "-DCADENCE_EMULATE", *flags, f'-DKERNEL_SOURCE="{SOURCE}"',
           f"-I{EMULATION}", str(EMULATION / "driver.cpp"), "-o", str(exe)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    BUILT[plan.defines] = exe
    return exe


def write_arguments(args: list, plan: KernelPlan, path: Path) -> None:
    """The driver's format: buffers as (byte count, bytes), ints as i64, floats as f64, then smem."""
    with open(path, "wb") as f:
        for a in args:
            if isinstance(a, torch.Tensor):
                t = a.detach().contiguous().cpu()
                data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
                f.write(struct.pack("<Q", len(data)) + data)
            elif isinstance(a, int):
                f.write(struct.pack("<q", a))
            else:
                f.write(struct.pack("<d", a))
        f.write(struct.pack("<q", plan.smem))


@pytest.mark.parametrize(
    "batch,sampled,grid,sync",
    [(1, False, 3, "barrier"), (3, True, 5, "barrier"), (1, False, 3, "ll")],  # LL's sampler reads as greedy's does
    ids=["greedy-1", "sampled-3", "greedy-1-ll"],
)
def test_emulated_cuda_code_predictor_matches_the_layer_path(model, tmp_path, batch, sampled, grid, sync):
    """fp32: the same codes (the kernel sums in another order; a near-tie could part them, none here),
    with grid barriers and with SYNC_LL's polled {value, tag} words instead (LL: two frames in a row
    on the same buffers, the first on other inputs, so the second runs over the first's words)."""
    codes, expected = run_both(model, tmp_path, batch, sampled, grid, ll=sync == "ll", trace=batch == 3)
    assert np.array_equal(codes, expected), f"kernel {codes.tolist()} layer path {expected.tolist()}"
    if batch == 3:  # with TRACE: every CTA's five stamps a phase, in order (benchmarks read them)
        stamps = np.fromfile(tmp_path / "codes.bin.trace", dtype=np.int64).reshape(grid, -1)[:, 2:]
        layers = model.config.talker.code_predictor.num_hidden_layers
        stamps = stamps.reshape(grid, phases(15, layers), STAMPS)
        ends = stamps[:, :, 4]
        assert (np.diff(ends, axis=1) > 0).all()  # every CTA passed every phase's end, one after another
        worked = stamps[:, 1:, 0] > 0
        assert worked.any(axis=0).all() and worked[0].all()  # each phase had a CTA at work; CTA 0 in all
        starts = ends[:, :-1]
        steps = [starts, *(stamps[:, 1:, j] for j in range(4))]  # rows in, normed, weights, work done
        for before, after in zip(steps, steps[1:], strict=False):
            assert (before <= after)[worked].all()
        assert (stamps[:, 1:, 3] <= ends[:, 1:]).all()


def test_emulated_cuda_code_predictor_in_bf16_agrees_with_the_layer_path(model_bf16, tmp_path):
    """bf16, greedy, 4 streams: rounded at the layer path's points, summed in another order, so a
    near-tie parts a stream now and then, and every later code of that stream follows (each code is
    the next input; 46/60 equal when written). Every stream's first code equal and most codes equal;
    a wrong rounding or index agrees on ~none. (Sampled bf16 agreed on 48/60 when written; left out
    for CI time: the fp32 sampled test covers the sampler's logic.)"""
    codes, expected = run_both(model_bf16, tmp_path, 4, False, 3)
    same = codes == expected
    assert same[:, 0].all() and same.mean() >= 0.5, f"kernel {codes.tolist()} layer path {expected.tolist()}"


def kernel_setup(fast, ll: bool, grid: int = 1, trace: bool = False) -> tuple[CodePredictorBuffers, KernelPlan]:
    """The kernel's buffers for 4 streams over the fused walk's code predictor (a grid of `grid`
    CTAs), and its plan with 2 consumer warps (fewer fibers than a GPU's 8; the same code paths)."""
    buffers = CodePredictorBuffers(fast.cp_stack, *fast.code_predictor_weights(), 4, fast.cp_k, fast.cp_v, grid)
    plan = KernelPlan.of(buffers, SHARED_MEMORY, consumer_warps=2, ll=ll, trace=trace)
    if ll:
        use_words(buffers)
    return buffers, plan


def run_both(
    model: Qwen3TTS, tmp_path: Path, batch: int, sampled: bool, grid: int, ll: bool = False, trace: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The codes [batch, 15] of the emulated kernel on a grid of `grid` CTAs, and of the layer path.
    With `ll` the kernel runs two frames on the same buffers, the epoch advanced between them; with
    `trace` it stamps (codes.bin.trace)."""
    core = build_core(model, config(attention_backend="torch"))
    fast = core.talker.fast
    cp = fast.talker.code_predictor
    g = torch.Generator().manual_seed(batch)
    hidden = torch.randn(batch, model.config.talker.hidden_size, generator=g).to(model.dtype)
    code0 = torch.randint(0, 2048, (batch,), generator=g)
    slots = torch.arange(batch)
    step, seed = torch.full((batch,), 5), torch.arange(batch) + 7
    codes_state = fast.state.codes
    if sampled:
        codes_state.do_sample[:batch], codes_state.temperature[:batch] = True, 0.9
        codes_state.top_k[:batch], codes_state.top_p[:batch] = 50, 0.8
    expected = fast._predict_codes(hidden, code0, step, seed, slots)  # the layer path: FusedStack, torch ops

    buffers, plan = kernel_setup(fast, ll, grid, trace)
    for cache in (buffers.k_cache, buffers.v_cache):  # the layer path's keys and values: the kernel writes its own
        cache.normal_(generator=g)
    first = cp.small_to_mtp_projection(torch.stack([hidden, fast.talker.embed_codec(code0)], dim=1)).flatten(0, 1)
    c = codes_state
    params = RowParams(c.do_sample[slots], c.temperature[slots], c.top_k[slots], c.top_p[slots])
    exe = build(plan, tmp_path)
    args = kernel_arguments(buffers, plan, first, params, seed, step)
    write_arguments(args, plan, tmp_path / "args.bin")
    frames = "2" if ll else "1"
    done = subprocess.run([str(exe), str(tmp_path / "args.bin"), str(tmp_path / "codes.bin"), str(grid), frames],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    codes = np.frombuffer((tmp_path / "codes.bin").read_bytes(), dtype=np.int64).reshape(4, -1)[:batch]
    assert codes.shape == (batch, 15)
    return codes, expected.numpy()


def test_each_ll_frame_gets_tags_of_its_own(model):
    """SYNC_LL's guard against a word of an earlier frame passing for this one's: every call advances
    the epoch, and the input rows carry the new epoch's first tag above the values' own bits."""
    fast = build_core(model, config(attention_backend="torch")).talker.fast
    buffers, plan = kernel_setup(fast, ll=True)
    first = torch.randn(2, model.config.talker.hidden_size)
    c = fast.state.codes
    params = RowParams(c.do_sample[:1], c.temperature[:1], c.top_k[:1], c.top_p[:1])
    bits = first.view(torch.int32).long() & 0xFFFFFFFF
    zero = torch.zeros(1, dtype=torch.long)
    for epoch in (1, 2):
        kernel_arguments(buffers, plan, first, params, zero, zero)
        assert int(buffers.epoch) == epoch
        assert torch.equal(buffers.d[:2] & 0xFFFFFFFF, bits)
        assert torch.equal(buffers.d[:2] >> 32, torch.full_like(bits, epoch * 1024))
    assert (buffers.qkv == -1).all()  # untouched words: a tag no phase writes


def test_the_python_mirrors_of_the_kernel_constants_agree_with_its_source():
    # KernelPlan reserves the sampler's shared memory and the trace is read back by phase from
    # Python; each constant is written in both languages, so they are compared here.
    def constant(path: Path, name: str, **names: int) -> int:
        expression = re.search(rf"constexpr int {name} = ([^;]+);", path.read_text()).group(1)
        return eval(expression, {}, names)  # small integer arithmetic from our own source

    assert constant(SOURCE.with_name("sampling.cuh"), "SAMPLER_WORDS") == SAMPLER_WORDS
    assert constant(SOURCE, "STAMPS") == STAMPS
    for steps, layers in [(15, 5), (3, 2)]:
        assert constant(SOURCE, "PHASES", STEPS=steps, LAYERS=layers) == phases(steps, layers)
    # the samplers' uniforms (sample_math.cuh, shared with sampler.cu) clamped below 1 as
    # rng.uniform clamps them (a 1.0 made a NaN that won)
    clamp = re.search(r"fminf\(.*, ([0-9.]+)f\);", SOURCE.with_name("sample_math.cuh").read_text()).group(1)
    assert np.float32(clamp) == np.float32(U_MAX) < 1
