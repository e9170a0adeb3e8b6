"""The Base models' speaker encoder: 24 kHz audio -> log-mel -> ECAPA-TDNN -> x-vector.

The x-vector takes the place of a preset speaker's row in the talker's codec track, so it has the
talker's width. Module paths equal the keys of `model.safetensors` under `speaker_encoder.`.

The mel front end is the official one: reflect-pad (n_fft - hop) / 2 on both sides, an uncentred
Hann STFT, magnitude sqrt(re^2 + im^2 + 1e-9), a Slaney-scale, Slaney-normalised mel filterbank
(librosa's default, built here in float64 and rounded to float32 as librosa does, so cadence needs
no librosa), then log(max(mel, 1e-5)).

ECAPA-TDNN (Desplanques et al. 2020) as the official code builds it: every conv is
`padding="same", padding_mode="reflect"`; no batch norm; attentive statistics pooling over the
whole utterance.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import SpeakerEncoderConfig

# extract_speaker_embedding's front end (fixed in the official code, not read from the config).
N_FFT = 1024
HOP = 256
FMIN = 0.0
FMAX = 12000.0


def _hz_to_mel(hz: torch.Tensor) -> torch.Tensor:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa, htk=False)."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    mel = hz / f_sp
    return torch.where(hz >= min_log_hz, min_log_mel + torch.log(hz / min_log_hz) / logstep, mel)


def _mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(mel >= min_log_mel, min_log_hz * torch.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> torch.Tensor:
    """[n_mels, n_fft/2 + 1] triangular filters with Slaney area normalisation (librosa.filters.mel)."""
    fft_freqs = torch.linspace(0, sample_rate / 2, 1 + n_fft // 2, dtype=torch.float64)
    mel_pts = torch.linspace(
        float(_hz_to_mel(torch.tensor(fmin, dtype=torch.float64))),
        float(_hz_to_mel(torch.tensor(fmax, dtype=torch.float64))),
        n_mels + 2,
        dtype=torch.float64,
    )
    edges = _mel_to_hz(mel_pts)
    widths = edges.diff()
    ramps = edges[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = torch.clamp(torch.minimum(lower, upper), min=0).float()
    # librosa stores the triangles in float32, then scales them in place by a float64 factor.
    enorm = 2.0 / (edges[2:] - edges[:-2])
    return (weights.double() * enorm[:, None]).float()


def log_mel(wav: torch.Tensor, sample_rate: int, n_mels: int) -> torch.Tensor:
    """waveform [B, L] at `sample_rate` -> log-mel [B, L // hop, n_mels] (fp32)."""
    basis = mel_filterbank(sample_rate, N_FFT, n_mels, FMIN, FMAX).to(wav.device)
    pad = (N_FFT - HOP) // 2
    wav = torch.nn.functional.pad(wav[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(
        wav, N_FFT, hop_length=HOP, win_length=N_FFT, window=torch.hann_window(N_FFT, device=wav.device),
        center=False, onesided=True, return_complex=True,
    )  # fmt: skip
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.matmul(basis, magnitude)
    return torch.log(torch.clamp(mel, min=1e-5)).transpose(1, 2)


def _conv(cin: int, cout: int, kernel: int, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(cin, cout, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TimeDelayNetBlock(nn.Module):
    """A TDNN layer: conv ("same", reflect padding) -> ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _conv(cin, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Channels split into `scale` groups; group i > 0 passes a TDNN after adding group i-1's output."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        self.scale = scale
        width = channels // scale
        self.blocks = nn.ModuleList(TimeDelayNetBlock(width, width, kernel, dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                out = part
            elif i == 1:
                out = self.blocks[0](part)
            else:
                out = self.blocks[i - 1](part + outs[-1])
            outs.append(out)
        return torch.cat(outs, dim=1)


class SqueezeExcitationBlock(nn.Module):
    """Channel gates from the time-averaged input: x * sigmoid(conv2(relu(conv1(mean_t x))))."""

    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _conv(channels, se_channels, 1)
        self.conv2 = _conv(se_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SqueezeExcitationRes2NetBlock(nn.Module):
    """TDNN (1x1) -> Res2Net -> TDNN (1x1) -> squeeze-excitation, plus the input."""

    def __init__(self, cin: int, cout: int, scale: int, se_channels: int, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TimeDelayNetBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, scale, kernel, dilation)
        self.tdnn2 = TimeDelayNetBlock(cout, cout, 1, 1)
        self.se_block = SqueezeExcitationBlock(cout, se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


class AttentiveStatisticsPooling(nn.Module):
    """[B, C, T] -> [B, 2C, 1]: attention-weighted mean and std over time, the attention seeing each
    frame together with the utterance's global mean and std."""

    EPS = 1e-12

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayNetBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels, 1)

    def _stats(self, x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = (weights * x).sum(2)
        std = torch.sqrt((weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(self.EPS))
        return mean, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[-1]
        # Uniform weights as the official code forms them (ones / length): the same rounding.
        uniform = torch.ones(x.shape[0], 1, t, dtype=x.dtype, device=x.device)
        mean, std = self._stats(x, uniform / uniform.sum(dim=2, keepdim=True))
        context = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, t), std.unsqueeze(2).repeat(1, 1, t)], dim=1)
        attention = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = self._stats(x, attention)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """`speaker_encoder`: log-mel [B, T, mel_dim] -> x-vector [B, enc_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        ch, ks, ds = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        blocks: list[nn.Module] = [TimeDelayNetBlock(cfg.mel_dim, ch[0], ks[0], ds[0])]
        scale, se = cfg.enc_res2net_scale, cfg.enc_se_channels
        for i in range(1, len(ch) - 1):
            blocks.append(SqueezeExcitationRes2NetBlock(ch[i - 1], ch[i], scale, se, ks[i], ds[i]))
        self.blocks = nn.ModuleList(blocks)
        # Multi-layer feature aggregation over the SE-Res2Net outputs (their channels sum to ch[-1]).
        self.mfa = TimeDelayNetBlock(ch[-1], ch[-1], ks[-1], ds[-1])
        self.asp = AttentiveStatisticsPooling(ch[-1], cfg.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim, 1)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)


class SpeakerEncoderModel(nn.Module):
    """Root for loading `speaker_encoder.*` from the talker file (`model.safetensors`)."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.speaker_encoder = SpeakerEncoder(cfg)

    @torch.no_grad()
    def embed(self, wav: torch.Tensor) -> torch.Tensor:
        """One utterance's float samples at `sample_rate` [L] -> x-vector [enc_dim] (fp32, on the CPU)."""
        if wav.dim() != 1:
            raise ValueError(f"expected a 1-D waveform, got shape {tuple(wav.shape)}")
        if wav.numel() <= N_FFT:
            raise ValueError(f"{wav.numel()} samples is too short for a speaker embedding (more than {N_FFT} needed)")
        dev = next(self.parameters()).device
        mels = log_mel(wav.to(dev, torch.float32)[None], self.cfg.sample_rate, self.cfg.mel_dim)
        return self.speaker_encoder(mels)[0].float().cpu()
