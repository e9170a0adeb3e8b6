"""The sampler kernel of the fast decode step (Triton): one program a row applies the repetition
penalty and the EOS / suppression masks, then takes the argmax or, sampling, the Gumbel-max over
the temperature-scaled, top-k / top-p filtered logits with counter-based noise (rng.py), and may
write the token's embedding row for the next step. reference.sample_tokens is its definition; it
samples where the CUDA sampler does not (dispatch.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..launch.pdl import pdl_launch
from ..launch.triton_pdl import pdl_entry
from ..tile_table import current_table
from .reference import check_token_outputs
from .rng import U_MAX
from .spec import NEW_TOKENS, TokenOutputs, TokenSampling

_U_MAX = tl.constexpr(U_MAX)  # the noise's uniforms stay below 1 (rng.py)


@triton.jit
def _mix32(x):
    # uint32 lanes: multiplication wraps mod 2^32 and shifts are logical, which is exactly what
    # rng.py computes with masked int64 arithmetic.
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x2C1B3C6D
    x = x ^ (x >> 16)
    return x


@triton.jit
def _sortable(x):
    """fp32 -> int32 keys with the same order (IEEE bits, negatives flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


# The top-k threshold's search tests TOPK_WAYS - 1 thresholds a pass: each pass is a block
# reduction, each threshold a compare per key. Each threshold's count is a 16-bit field of one
# int64 sum, so at most 4 thresholds (5 ways; 2 is a bisection, 32 passes). 4 ways (16 passes) is
# the fastest on 2048 and 3072 codes.
TOPK_WAYS = 4


def topk_search_passes(ways: int) -> int:
    """Passes that narrow the 32-bit key range to one key: each leaves at most ceil(width / ways)."""
    if not 2 <= ways <= 5:
        raise ValueError(f"the top-k search takes 2 to 5 ways (a 16-bit count per threshold), got {ways}")
    width, passes = 2**32, 0
    while width > 1:
        width, passes = -(-width // ways), passes + 1
    return passes


def topk_search(block: int) -> tuple[int, int]:
    """(ways, passes) of the top-k threshold's search over `block` keys, for every kernel that
    samples: TOPK_WAYS while a packed 16-bit count holds the block's keys (< 2^16), else 2 (a
    bisection: one count a pass, nothing packed)."""
    ways = TOPK_WAYS if block < 2**16 else 2
    return ways, topk_search_passes(ways)


@triton.jit
def _kth_largest_key(key, k, WAYS: tl.constexpr, PASSES: tl.constexpr):
    """The k-th largest of the int32 keys [BLOCK], ties counted (1 <= k <= BLOCK; BLOCK < 2^16 unless
    WAYS is 2, whose one count is not packed): a WAYS-ary search over the key range keeping
    count(key >= lo) >= k > count(key >= hi). Each pass counts the keys at or above the WAYS - 1
    thresholds inside (lo, hi) in one reduction (the counts packed as 16-bit fields of an int64),
    then keeps the interval between the last threshold that still counts k keys and the next."""
    lo = tl.full((), -(2**31), tl.int64)
    hi = tl.full((), 2**31, tl.int64)
    for _ in range(PASSES):
        width = hi - lo
        packed = tl.zeros_like(key).to(tl.int64)
        for j in tl.static_range(1, WAYS):  # t_j = lo + width * j // WAYS < hi: fits int32
            t = (lo + (width * j) // WAYS).to(tl.int32)
            packed += (key >= t).to(tl.int64) << (16 * (j - 1))
        counts = tl.sum(packed, axis=0)
        kept = tl.zeros((), tl.int64)  # thresholds still counting k keys: a prefix of j
        for j in tl.static_range(1, WAYS):
            count = counts >> (16 * (j - 1))
            if j < WAYS - 1:  # the last field has nothing above it: unmasked, it holds any count
                count = count & 0xFFFF
            kept += (count >= k).to(tl.int64)
        lo, hi = lo + (width * kept) // WAYS, lo + (width * (kept + 1)) // WAYS
    return lo.to(tl.int32)


@triton.jit
def _sample_choice(x, col, valid, row, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr, codebook_key, V,
                   TOPK_WAYS: tl.constexpr, TOPK_PASSES: tl.constexpr):  # fmt: skip
    """Row `row`'s token from its processed logits x [BLOCK] (fp32, -inf where invalid): the argmax,
    or with do_sample the Gumbel-max over the temperature-scaled, top-k / top-p filtered values
    with counter-based noise of (seed, frame, codebook key, column)."""
    do = tl.load(do_ptr + row) != 0
    if do:
        # Temperature, then top-k and top-p as value thresholds found by searching the
        # order-preserving integer keys (a few reductions instead of sorting the vocabulary).
        y = x / tl.load(temp_ptr + row)
        k = tl.load(topk_ptr + row)
        if (k > 0) & (k < V):
            key = _sortable(y)
            kth = _kth_largest_key(key, k, TOPK_WAYS, TOPK_PASSES)
            y = tl.where(key >= kth, y, -float("inf"))  # ties at the k-th value kept, as HF
        top_p = tl.load(topp_ptr + row)
        if top_p < 1.0:
            key = _sortable(y).to(tl.int64)
            probs = tl.exp(y - tl.max(y, axis=0))
            probs = probs / tl.sum(probs, axis=0)
            # keep values v with mass(key <= v) > 1 - top_p: find the smallest such key
            lo = tl.min(key, axis=0) - 1  # mass(<= lo) = 0
            hi = tl.max(key, axis=0)  # mass(<= hi) = 1
            for _ in range(33):
                mid = lo + (hi - lo) // 2
                ok = tl.sum(tl.where(key <= mid, probs, 0.0), axis=0) > 1.0 - top_p
                hi = tl.where(ok, mid, hi)
                lo = tl.where(ok, lo, mid)
            y = tl.where(key >= hi, y, -float("inf"))
        seed = tl.load(seed_ptr + row).to(tl.uint64)
        frame = tl.load(frame_ptr + row).to(tl.uint64)
        hkey = _mix32(seed.to(tl.uint32) ^ 0x1E3779B9)
        hkey = _mix32(hkey ^ (seed >> 32).to(tl.uint32))
        hkey = _mix32(hkey ^ frame.to(tl.uint32))
        hkey = _mix32(hkey ^ codebook_key.to(tl.uint32))
        h = _mix32(hkey ^ (col.to(tl.uint32) * 0x1E3779B9 + 0x5BD1E995))
        h = _mix32(h ^ hkey)
        u = tl.minimum(((h >> 8).to(tl.float32) + 0.5) / 16777216.0, _U_MAX)  # rng.uniform's clamp
        noisy = tl.where(valid, y - tl.log(-tl.log(u)), -float("inf"))
        choice = tl.argmax(noisy, axis=0)
    else:
        choice = tl.argmax(x, axis=0)
    return choice


@triton.jit
def _sample_kernel(
    logits_ptr, rows_ptr, seen_ptr, pen_ptr, ban_ptr, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr,
    out_ptr, table_ptr, emb_ptr, V, eos_id, suppress_start, eos_min_frames, codebook_key, out_stride, emb_stride, H,
    HAS_ROWS: tl.constexpr, HAS_SEEN: tl.constexpr, MARK_SEEN: tl.constexpr, HAS_BAN: tl.constexpr,
    HAS_EMBED: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr, TOPK_WAYS: tl.constexpr,
    TOPK_PASSES: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    pdl_entry(USE_PDL)
    row = tl.program_id(0)
    # The per-row inputs' table row: the row itself, or its slot in the walk's slot-indexed state.
    trow = tl.load(rows_ptr + row) if HAS_ROWS else row
    col = tl.arange(0, BLOCK)
    valid = col < V
    x = tl.load(logits_ptr + row * V + col, mask=valid, other=-float("inf")).to(tl.float32)
    if HAS_SEEN:
        seen = tl.load(seen_ptr + trow * V + col, mask=valid, other=0) != 0
        p = tl.load(pen_ptr + trow)
        x = tl.where(seen, tl.where(x < 0, x * p, x / p), x)
    if HAS_BAN:
        ban = (tl.load(ban_ptr + trow) != 0) | (tl.load(frame_ptr + trow) < eos_min_frames)
        banned = ((col >= suppress_start) & (col != eos_id)) | ((col == eos_id) & ban)
        x = tl.where(banned, -float("inf"), x)
    choice = _sample_choice(x, col, valid, trow, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr,
                            codebook_key, V, TOPK_WAYS, TOPK_PASSES)  # fmt: skip
    tl.store(out_ptr + row * out_stride, choice.to(tl.int64))
    if MARK_SEEN:  # the token joins the row's history: no index_put kernel after
        tl.store(seen_ptr + trow * V + choice, 1)
    if HAS_EMBED:  # the token's embedding row: the next step's input, without a lookup kernel
        for h0 in range(0, H, BLOCK_H):
            hc = h0 + tl.arange(0, BLOCK_H)
            e = tl.load(table_ptr + choice.to(tl.int64) * H + hc, mask=hc < H)
            tl.store(emb_ptr + row * emb_stride + hc, e, mask=hc < H)


def sample_tokens(logits: torch.Tensor, spec: TokenSampling, outputs: TokenOutputs = NEW_TOKENS) -> torch.Tensor:
    """reference.sample_tokens by the Triton kernel: one program a row (of the tile table's
    sampler.triton_warps warps), any float logits."""
    n, v = logits.shape
    out = check_token_outputs(n, logits.device, outputs, spec.history)
    rows, history, eos, params = spec.rows, spec.history, spec.eos, spec.params
    table, emb = outputs.embed_table, outputs.embed_out
    dummy = logits
    h = table.shape[1] if table is not None else 0
    block = triton.next_power_of_2(v)
    ways, passes = topk_search(block)
    eos_args = (eos.eos_id, eos.suppress_start, eos.min_frames) if eos is not None else (-1, -1, 0)
    _sample_kernel[(n,)](
        logits, rows if rows is not None else dummy, history.seen if history else dummy,
        history.penalty if history else dummy, eos.ban if eos is not None else dummy, params.do_sample,
        params.temperature, params.top_k, params.top_p, spec.seed, spec.frame, out, table if h else dummy,
        emb if h else dummy, v, *eos_args, (spec.codebook * 0x1E3779B9) & 0xFFFFFFFF, out.stride(0),
        emb.stride(0) if h else 0, h, HAS_ROWS=rows is not None, HAS_SEEN=history is not None,
        MARK_SEEN=history is not None and history.record, HAS_BAN=eos is not None, HAS_EMBED=h > 0, BLOCK=block,
        BLOCK_H=min(1024, triton.next_power_of_2(max(h, 1))), TOPK_WAYS=ways, TOPK_PASSES=passes,
        num_warps=current_table().sampler.triton_warps, **pdl_launch(logits),
    )  # fmt: skip
    return out
