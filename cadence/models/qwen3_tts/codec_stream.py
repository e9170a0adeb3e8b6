"""A stateful streaming Codec decoder: each call decodes only the new frames of B streams at once.

`StreamingCodecDecoder` wraps an offline `CodecDecoder` (same modules; the convs it runs
time-major, `TimeMajorConv`, get rearranged copies of their weights) and a
`CodecStreamState`: a pool of S slots, each owned by one stream, held as preallocated slot-indexed
tensors so the per-call work is gather -> run -> scatter with no per-stream Python (and, later,
capturable by CUDA graphs for each (batch, frames) shape).

State of one slot, oldest sample first along the last/time axis:

    frames  [S]                      frames decoded so far = RoPE position of the next frame
    conv[i] [S, C_i, h_i]            for each CausalConv1d with history h_i = (k-1)*d > 0: its last h_i
                                     input samples; for each CausalTransConv1d whose kernel spans p > 0
                                     earlier inputs (k > s): its last p input frames
    keys    [S, L, W-1, Hkv, D]      per transformer layer, the RoPE-rotated keys of the last W-1 frames
    values  [S, L, W-1, Hkv, D]      ... and their values (W = sliding window)

The real 0.6B codec holds 5,193,992 bytes per slot in fp32: 4,653,056 of KV (8 layers x 71 frames x
16 heads x 64 x K,V) and 540,928 of conv inputs (half of that in the dilation-9 residual convs).
Each pool takes the dtype of the weights that read it, so a bf16/fp16 decoder (codec.cast_decoder)
holds about half: its output conv's 6-sample history stays fp32, as that conv does.

Why a chunk's output equals the offline decode of the whole stream (the decoder is causal throughout):
- RVQ dequantisation, 1x1 convs, SnakeBeta, norms, MLPs and the final clamp act per frame/sample.
- A causal conv's output sample depends on its (k-1)*d previous inputs; offline those are the stream's
  earlier samples or, before the start, the zero left padding. The carried history is exactly that
  (zeros on reset), so `conv(cat(history, new))` without padding gives the offline samples.
- A transposed conv (kernel k, stride s, right trim) writes output block t from input t and the
  p = ceil(k/s)-1 inputs before it; running it on `cat(previous p inputs, new)` and keeping the blocks
  of the new inputs reproduces the offline output (zero inputs before the start add nothing, as offline).
- Attention: query at position i sees keys i-W < j <= i. The W-1 carried keys plus the chunk's own
  cover that; keys are stored rotated at their absolute positions and queries are rotated at theirs,
  the same positions the offline pass uses, so the scores are the same numbers. Cache entries of
  positions < 0 (a young stream) are masked out.
Only summation order differs from the offline pass: ~6e-6 max abs on the tiny test codec. A full-size
codec with random weights shows ~1e-4, which is also how far its own offline
decode of 100 frames is from the first 100 frames of a 110-frame decode: the fp32 floor, not state.
In bf16/fp16 every layer rounds those differences, so a stream and the same decoder's offline decode
are about as far apart as either is from fp32 (tests/test_codec_low_precision.py), not bit-equal.

The official `chunked_decode` re-decodes utterances longer than 300 frames in windows with 25
frames of context (a memory bound that changes the audio after frame 300); this decoder equals
`CodecDecoder.forward` at any length, and reproduces those windows only when asked
(codec_windows.py, `--codec-decode chunked`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...engine.transfer import to_device
from ...kernels.ops import ops_for
from .codec import (
    CausalConv1d,
    CausalTransConv1d,
    CodecDecoder,
    ConvNeXtBlock,
    SnakeBeta,
    attention_fp32,
)
from .codec_fused import CodebookTables, FusedCodecTransformer
from .layers import rope_cos_sin

Slots = torch.Tensor | Sequence[int]


@dataclass(frozen=True)
class ConvHistory:
    """One carried conv input: `length` samples (conv) or input frames (transposed conv) of `channels`."""

    module: nn.Module
    channels: int
    length: int

    @property
    def dtype(self) -> torch.dtype:
        """The conv's weight dtype: the conv casts its input to it, so its history is kept in it."""
        return self.module.conv.weight.dtype


def conv_histories(decoder: CodecDecoder) -> list[ConvHistory]:
    """Every conv of `decoder` that needs earlier inputs, in module order."""
    out = []
    for m in decoder.modules():
        if isinstance(m, CausalConv1d) and m.history > 0:
            if m.conv.stride[0] != 1 or m.conv.padding[0] != 0:
                raise ValueError("streaming expects stride-1, unpadded causal convs")
            out.append(ConvHistory(m, m.conv.in_channels, m.history))
        elif isinstance(m, CausalTransConv1d):
            kernel, stride = m.conv.kernel_size[0], m.conv.stride[0]
            if m.conv.padding[0] != 0 or m.conv.dilation[0] != 1 or m.trim != kernel - stride or kernel < stride:
                raise ValueError("streaming expects right-trimmed transposed convs with kernel >= stride")
            frames = math.ceil(kernel / stride) - 1
            if frames > 0:
                out.append(ConvHistory(m, m.conv.in_channels, frames))
    return out


@contextlib.contextmanager
def tf32_switches(convs: bool, matmuls: bool):
    """PyTorch's two TF32 switches (cuDNN convolutions, fp32 matmuls) set for a block, restored after."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = convs, matmuls
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def tf32_as_convs(tf32: bool | None = None) -> contextlib.AbstractContextManager:
    """The codec's fp32 convolutions and linears (transformer, ConvNeXt) in TF32, or both exact.

    PyTorch runs cuDNN convolutions in TF32 unless `torch.backends.cudnn.allow_tf32` is cleared,
    but fp32 matmuls exactly unless `torch.backends.cuda.matmul.allow_tf32` is set; so the codec,
    whose arithmetic is ~95 % convolution, ran its few linears on the slow fp32 path (2.4 ms of a
    22 ms 64x8 chunk). One switch governs both here: `tf32`, or when None the process's
    `torch.backends.cudnn.allow_tf32` (PyTorch's default: on). Both flags are restored after, so
    the talker's matmuls keep the process's settings."""
    use = torch.backends.cudnn.allow_tf32 if tf32 is None else tf32
    return tf32_switches(use, use)


def time_major(batch: int, channels: int, length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An empty logical [B, C, T] tensor stored time-major ([B, T, C] in memory, channels-last)."""
    return torch.empty(batch, length, channels, dtype=dtype, device=device).transpose(1, 2)


def transposed_as_conv(conv: nn.ConvTranspose1d) -> torch.Tensor:
    """The weight of a Conv1d that computes `conv` (kernel k, stride s, no padding) phase by phase.

    Output block t of the transposed conv (s samples) is a sum over the m = ceil(k/s) inputs
    t-m+1 .. t, each through one s-wide slice of the kernel. A Conv1d with kernel m and s * C_out
    output channels computes exactly those sums: its channel j * C_out + co at t is sample t*s + j
    of channel co, so in time-major memory ([T, s, C_out]) its output already is the interleaved
    [T*s, C_out]. Returned: [s * C_out, C_in, m], the kernel zero-padded to m * s taps.
    Why: cuDNN runs transposed convs as a backward-data (dgrad) kernel, slow at these shapes (one
    took 3.6 ms of a 51 ms 64x8 chunk in the profile), and forward convs are its fastest path.
    """
    c_in, c_out, k = conv.weight.shape
    s = conv.stride[0]
    m = math.ceil(k / s)
    w = F.pad(conv.weight.detach(), (0, m * s - k)).view(c_in, c_out, m, s)  # tap i*s + j
    # Conv1d tap i reads input t-m+1+i, which sits (m-1-i) blocks back: kernel slice m-1-i.
    return w.flip(2).permute(3, 1, 0, 2).reshape(s * c_out, c_in, m)


@dataclass
class TimeMajorConv:
    """A conv of the decoder stack run on time-major activations, as cuDNN's channels-last 2-D conv.

    cuDNN's fast fp32/TF32 convolution kernels are NHWC; fed channel-major tensors it transposes
    input, weight and output around every call (4.1 ms of a 26.6 ms 64x8 chunk in the profile).
    Keeping the stack's activations time-major and the weights channels-last removes those passes.
    A transposed conv (stride > 1) runs by phases (`transposed_as_conv`); with time-major output
    its interleaving is a free reshape. Input: the whole window, carried history first; no padding.
    """

    weight: torch.Tensor  # [C_out', C_in, 1, k], channels-last
    bias: torch.Tensor | None
    dilation: int
    phases: int  # 1 for a conv; the stride of a transposed conv

    @classmethod
    def of(cls, conv: nn.Conv1d | nn.ConvTranspose1d) -> TimeMajorConv:
        if conv.groups != 1:
            raise ValueError("time-major convs expect groups=1")
        transposed = isinstance(conv, nn.ConvTranspose1d)
        weight = transposed_as_conv(conv) if transposed else conv.weight.detach()
        return cls(
            weight=weight.unsqueeze(2).contiguous(memory_format=torch.channels_last),
            bias=conv.bias,
            dilation=1 if transposed else conv.dilation[0],
            phases=conv.stride[0] if transposed else 1,
        )

    def __call__(self, x: torch.Tensor, with_bias: bool) -> torch.Tensor:
        """[B, C_in, history + T] (time-major) -> [B, C_out, T * phases] (time-major)."""
        x4 = x.unsqueeze(2).contiguous(memory_format=torch.channels_last)  # a view when x is time-major
        bias = self.bias if with_bias else None
        if self.phases == 1:
            return F.conv2d(x4, self.weight, bias, dilation=(1, self.dilation)).squeeze(2)
        y = F.conv2d(x4, self.weight).squeeze(2)
        batch, channels, frames = y.shape
        y = y.transpose(1, 2).reshape(batch, frames * self.phases, channels // self.phases).transpose(1, 2)
        return y if bias is None else y + bias[:, None]


@dataclass
class CodecStreamState:
    """The slot pool (layout in the module docstring); slot dimension first everywhere."""

    frames: torch.Tensor
    conv: list[torch.Tensor]
    keys: torch.Tensor
    values: torch.Tensor

    @property
    def max_streams(self) -> int:
        return self.frames.shape[0]

    def tensors(self) -> list[torch.Tensor]:
        return [self.frames, *self.conv, self.keys, self.values]


class _Carry:
    """The gathered state of one call's B streams; steps read and replace it, then it is scattered
    back: a conv's history as soon as the conv has its input (`keep_conv`), the rest at the end."""

    def __init__(
        self,
        frames: torch.Tensor,
        conv: list[torch.Tensor],
        keys: torch.Tensor,
        values: torch.Tensor,
        keep_conv: Callable[[int, torch.Tensor], None],
    ):
        self.frames = frames  # [B] position of each stream's first new frame
        self.conv = conv  # each conv's carried inputs, gathered (copies: the pool may be written meanwhile)
        # Writes a conv's new history to the pool at once: a view kept until the call's end would hold
        # the conv's whole input window alive, and a chunk's memory peak would be the sum of every
        # window (~20 MB a stream-frame at full size, per CUDA graph).
        self.keep_conv = keep_conv
        self.keys = keys  # [B, L, W-1, H, D]
        self.values = values
        self.new_keys = list(keys.unbind(1))  # per layer; replaced when the layer attends
        self.new_values = list(values.unbind(1))

    def with_history(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """cat(carried inputs, x) along time; the carry keeps the last inputs for the next call."""
        full = torch.cat([self.conv[index], x], dim=-1)
        self.keep_conv(index, full[..., full.shape[-1] - self.conv[index].shape[-1] :])
        return full

    def attend(self, layer: int, mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of the chunk over the carried window plus itself; keeps the newest W-1 keys/values."""
        k_all = torch.cat([self.keys[:, layer], k], dim=1)
        v_all = torch.cat([self.values[:, layer], v], dim=1)
        self.new_keys[layer] = k_all[:, k.shape[1] :]
        self.new_values[layer] = v_all[:, v.shape[1] :]
        return attention_fp32(q, k_all, v_all, mask)


@dataclass
class _PreActivation:
    """The input of an activation not yet materialised: residual + (value + bias)."""

    value: torch.Tensor
    bias: torch.Tensor | None = None
    residual: torch.Tensor | None = None


class StreamingCodecDecoder:
    """Decodes chunks of many streams in batched calls; see the module docstring for why it is exact."""

    def __init__(self, decoder: CodecDecoder, tf32: bool | None = None):
        self.decoder = decoder
        self.cfg = decoder.cfg
        self.tf32 = tf32  # fp32 math in TF32 (True) or exact (False); None: as cudnn.allow_tf32 (tf32_as_convs)
        self.histories = conv_histories(decoder)
        self._history_index = {h.module: i for i, h in enumerate(self.histories)}
        self._convs: dict[nn.Module, TimeMajorConv] = {}  # the decoder stack's, set by allocate
        self._codebooks: CodebookTables | None = None  # set by allocate, as the next
        self._fused_transformer: FusedCodecTransformer | None = None
        self.state: CodecStreamState | None = None

    # ---- state pool -------------------------------------------------------------------------------

    def _kv_shape(self) -> tuple[int, int, int, int]:
        c = self.cfg
        return (c.num_hidden_layers, c.sliding_window - 1, c.num_key_value_heads, c.head_dim)

    def _kv_dtype(self) -> torch.dtype:
        return self.decoder.pre_transformer.layers[0].self_attn.k_proj.weight.dtype

    def bytes_per_stream(self) -> int:
        """State bytes one slot holds (conv histories, KV window, frame counter); computed from shapes."""
        conv = sum(h.channels * h.length * h.dtype.itemsize for h in self.histories)
        kv = 2 * math.prod(self._kv_shape()) * self._kv_dtype().itemsize
        return conv + kv + torch.int64.itemsize

    def allocate(self, max_streams: int) -> CodecStreamState:
        """Preallocate a cold pool of `max_streams` slots on the decoder's device, each tensor in the
        dtype of the weights that read it."""
        dev = next(self.decoder.parameters()).device
        z = functools.partial(torch.zeros, device=dev)
        self.state = CodecStreamState(
            frames=z(max_streams, dtype=torch.int64),
            conv=[z(max_streams, h.channels, h.length, dtype=h.dtype) for h in self.histories],
            keys=z(max_streams, *self._kv_shape(), dtype=self._kv_dtype()),
            values=z(max_streams, *self._kv_shape(), dtype=self._kv_dtype()),
        )
        # Rearranged copies of the weights of the convs run time-major (all transposed convs, and the
        # conv stack's after its first; `_step` runs the rest as they are), read now, on their device:
        # ~190 MB for the real codec in fp32, half that in bf16/fp16.
        stack, upsample = self.decoder.decoder, self.decoder.upsample
        convs = [m for m in stack.modules() if isinstance(m, CausalConv1d | CausalTransConv1d) and m is not stack[0]]
        convs += [m for m in upsample.modules() if isinstance(m, CausalTransConv1d)]
        self._convs = {m: TimeMajorConv.of(m.conv) for m in convs}
        # The transformer and codebook lookups on fused ops (codec_fused.py): ~280 fewer kernels a chunk.
        self._codebooks = CodebookTables(self.decoder.quantizer)
        self._fused_transformer = FusedCodecTransformer(self.decoder.pre_transformer)
        return self.state

    def _pool(self) -> CodecStreamState:
        if self.state is None:
            raise RuntimeError("call allocate(max_streams) first")
        return self.state

    def _slots(self, slots: Slots) -> torch.Tensor:
        device = self._pool().frames.device
        if isinstance(slots, torch.Tensor):
            return slots.to(device=device, dtype=torch.int64).reshape(-1)
        return to_device(list(slots), device).reshape(-1)  # no host wait for work in flight

    @torch.no_grad()
    def reset(self, slots: Slots) -> None:
        """Cold-start `slots` for new streams: zero histories (= the offline zero padding) and counters.

        The KV window is zeroed too although the position mask already hides it: masked garbage that
        is NaN/inf would still poison the weighted sum.
        """
        idx = self._slots(slots)
        for t in self._pool().tensors():
            t.index_fill_(0, idx, 0)

    # ---- decoding ---------------------------------------------------------------------------------

    @torch.no_grad()
    def decode(self, slots: Slots, codes: torch.Tensor) -> torch.Tensor:
        """Decode `codes` [B, F, 16] (F new frames for each stream) -> waveform [B, F * samples_per_frame].

        `slots` [B] must be distinct; stream b continues from where slot slots[b] left off.
        """
        pool = self._pool()
        idx = self._slots(slots)
        q = self.cfg.num_quantizers
        if codes.dim() != 3 or codes.shape[0] != idx.shape[0] or codes.shape[1] < 1 or codes.shape[2] != q:
            raise ValueError(f"codes must be [{idx.shape[0]}, F >= 1, {q}], got {list(codes.shape)}")
        frames = codes.shape[1]
        carry = _Carry(
            frames=pool.frames.index_select(0, idx),
            conv=[t.index_select(0, idx) for t in pool.conv],
            keys=pool.keys.index_select(0, idx),
            values=pool.values.index_select(0, idx),
            keep_conv=lambda i, tail: pool.conv[i].index_copy_(0, idx, tail),
        )
        with tf32_as_convs(self.tf32):
            wav = self._run(carry, codes.to(idx.device).long().transpose(1, 2))
        pool.keys.index_copy_(0, idx, torch.stack(carry.new_keys, dim=1))
        pool.values.index_copy_(0, idx, torch.stack(carry.new_values, dim=1))
        pool.frames.index_copy_(0, idx, carry.frames + frames)
        return wav

    def _run(self, carry: _Carry, codes: torch.Tensor) -> torch.Tensor:
        """`CodecDecoder.forward` on codes [B, 16, F], with every temporal op continuing from `carry`."""
        d = self.decoder
        h = self._step(d.pre_conv, self._codebooks.decode(codes), carry)
        h = self._transformer(h.transpose(1, 2), carry).transpose(1, 2)
        for stage in d.upsample:
            for m in stage:
                h = self._step(m, h, carry)
        return self._decoder_stack(h, carry).float().clamp(-1.0, 1.0).flatten(1)

    def _decoder_stack(self, h: torch.Tensor, carry: _Carry) -> torch.Tensor:
        """`decoder.decoder` (the conv stack up to 24 kHz), its memory traffic cut by fusion.

        At the sample rates of the last blocks the stack is bound by passes over the activations,
        not by its convs' arithmetic. So every SnakeBeta also takes the adds before it (the
        producing conv's bias, the residual) in one kernel, the sum kept only where it is the
        residual stream; and the activation in front of a conv with history is written straight
        into that conv's input window after the carried samples, so no concatenation copies it.
        Same adds in the same order as `_step`, each rounded where the unfused code rounds.
        After the first conv, activations are time-major and convs channels-last (`TimeMajorConv`).
        """
        first, *blocks, last_act, last_conv = self.decoder.decoder
        pending = _PreActivation(self._step(first, h, carry))
        for block in blocks:
            snake, up, *units = block.block
            upsampled = self._convs[up](self._activate(snake, pending, up, carry), with_bias=False)
            pending = _PreActivation(upsampled, up.conv.bias)
            for unit in units:
                x = time_major(*pending.value.shape, pending.value.dtype, pending.value.device)  # residual stream
                a1 = self._activate(unit.act1, pending, unit.conv1, carry, sum_out=x)
                h1 = _PreActivation(self._convs[unit.conv1](a1, with_bias=False), unit.conv1.conv.bias)
                a2 = self._activate(unit.act2, h1, unit.conv2, carry)
                pending = _PreActivation(self._convs[unit.conv2](a2, with_bias=False), unit.conv2.conv.bias, residual=x)
        return self._convs[last_conv](self._activate(last_act, pending, last_conv, carry), with_bias=True)

    def _activate(self, act: SnakeBeta, pre: _PreActivation, conv: nn.Module, carry: _Carry,
                  sum_out: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """SnakeBeta of `pre` as the input of `conv`, in its weights' dtype; where `conv` carries
        history, returns its whole input window (carried samples, then the new ones) and keeps the
        window's tail as the next call's history."""
        x = pre.value
        dtype = conv.conv.weight.dtype
        i = self._history_index.get(conv)
        batch, channels, length = x.shape
        if i is None:
            out = time_major(batch, channels, length, dtype, x.device)
            return ops_for(x).snake_beta(x, act.alpha, act.beta, pre.bias, pre.residual, out, sum_out)
        past = carry.conv[i]
        window = time_major(batch, channels, past.shape[-1] + length, dtype, x.device)
        window[..., : past.shape[-1]] = past
        ops_for(x).snake_beta(x, act.alpha, act.beta, pre.bias, pre.residual, window[..., past.shape[-1] :], sum_out)
        carry.keep_conv(i, window[..., x.shape[-1] :])
        return window

    def _step(self, m: nn.Module, x: torch.Tensor, carry: _Carry) -> torch.Tensor:
        """One decoder module on the new samples x [B, C, n]; stateless modules run as they are."""
        if isinstance(m, CausalConv1d):
            i = self._history_index.get(m)
            x = x.to(m.conv.weight.dtype)  # as CausalConv1d.forward: a conv runs in its weights' dtype
            return m.conv(x if i is None else carry.with_history(i, x))
        if isinstance(m, CausalTransConv1d):  # by phases (TimeMajorConv): the blocks of the new inputs
            i = self._history_index.get(m)
            x = x.to(m.conv.weight.dtype)
            return self._convs[m](x if i is None else carry.with_history(i, x), with_bias=True)
        if isinstance(m, ConvNeXtBlock):
            return x + m.pointwise(self._step(m.dwconv, x, carry))
        raise TypeError(f"no streaming rule for {type(m).__name__}")

    def _transformer(self, x: torch.Tensor, carry: _Carry) -> torch.Tensor:
        """`CodecTransformer.forward` on the chunk x [B, F, latent] at positions frames[b] + 0..F-1."""
        cfg = self.cfg
        n = x.shape[1]
        pos = carry.frames[:, None] + torch.arange(n, device=x.device)
        cos, sin = rope_cos_sin(pos, cfg.head_dim, cfg.rope_theta, torch.float32)  # RoPE in fp32 (CodecAttention.qkv)
        mask = self._window_mask(carry.frames, n)
        return self._fused_transformer(x, cos, sin, lambda i, q, k, v: carry.attend(i, mask, q, k, v))

    def _window_mask(self, start: torch.Tensor, n: int) -> torch.Tensor:
        """bool [B, n, W-1+n] over keys (carried window, then the chunk).

        Key j sits at position start - (W-1) + j and query i at start + i, so the window test
        i - W < j - (W-1) <= i is the same for every stream; keys before position 0 are not there.
        """
        past = self.cfg.sliding_window - 1
        i = torch.arange(n, device=start.device)[:, None]
        j = torch.arange(past + n, device=start.device)[None, :]
        d = i + past - j
        window = (d >= 0) & (d < self.cfg.sliding_window)
        exists = j >= past - start[:, None]  # [B, W-1+n]
        return window[None] & exists[:, None, :]
