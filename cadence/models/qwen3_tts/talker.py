"""The Talker partition's modules: talker (28-layer Qwen3 decoder) and code predictor (5 layers).

Module paths equal checkpoint keys (`talker.model.layers.0.self_attn.q_proj.weight`, ...), so a
checkpoint loads with a plain strict state-dict load.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import CodePredictorConfig, Qwen3TTSConfig, TalkerConfig
from .layers import Attend, ContiguousKVCache, Qwen3Stack

# pick(j, logits [B, vocab] fp32) -> codes [B]: chooses codebook j+1 from head j's logits.
Pick = Callable[[int, torch.Tensor], torch.Tensor]


class TalkerModel(Qwen3Stack):
    """`talker.model`: the decoder stack plus the two input tables (codec tokens, text tokens)."""

    def __init__(self, cfg: TalkerConfig):
        super().__init__(cfg)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    """`talker.text_projection`: text_hidden -> text_hidden -> hidden, SiLU between, with biases."""

    def __init__(self, cfg: TalkerConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.text_hidden_size, cfg.text_hidden_size, bias=True)
        self.linear_fc2 = nn.Linear(cfg.text_hidden_size, cfg.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class CodePredictorModel(Qwen3Stack):
    """`talker.code_predictor.model`: 15 input tables (codebooks 1..15) and the depth stack."""

    def __init__(self, cfg: CodePredictorConfig, embedding_dim: int):
        super().__init__(cfg)
        # Table j embeds codebook j+1, in the *talker's* width (projected down on 1.7B).
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, embedding_dim) for _ in range(cfg.num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    """`talker.code_predictor`: predicts codebooks 1..15 of a frame from the talker's hidden state.

    Its sequence is [talker hidden, embed(code0), embed(code1), ...] at positions 0..15 with a fresh
    cache for every frame; head j reads position j+1 and predicts codebook j+1.
    """

    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int):
        super().__init__()
        self.cfg = cfg
        self.model = CodePredictorModel(cfg, talker_hidden)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(cfg.num_code_groups - 1)
        )
        # 1.7B: the talker is wider than the code predictor. 0.6B: same width, no weights.
        self.small_to_mtp_projection: nn.Module = (
            nn.Linear(talker_hidden, cfg.hidden_size, bias=True) if talker_hidden != cfg.hidden_size else nn.Identity()
        )

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """embeds in the talker's width [B,L,Ht] -> post-norm hidden [B,L,Hcp]."""
        return self.model(self.small_to_mtp_projection(embeds), positions, attend)


class Talker(nn.Module):
    """`talker`."""

    def __init__(self, cfg: TalkerConfig):
        super().__init__()
        self.cfg = cfg
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, cfg.hidden_size)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """Text-track embedding T(x) = text_projection(text_embedding(x))."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor:
        """Codec-track embedding C(x) of code0 / control tokens."""
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum of the 16 code embeddings of frames [..., 16] -> [..., H].

        Stacked and reduced in one sum like the official code: in bf16 one reduction rounds once,
        sixteen chained adds would round sixteen times.
        """
        parts = [self.model.codec_embedding(codes[..., 0])]
        for j, table in enumerate(self.code_predictor.model.codec_embedding):
            parts.append(table(codes[..., j + 1]))
        return torch.stack(parts, dim=-2).sum(-2)

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """Post-norm hidden states of the talker stack; `codec_head` turns them into code0 logits."""
        return self.model(embeds, positions, attend)

    def predict_codes(self, hidden: torch.Tensor, code0: torch.Tensor, pick: Pick) -> torch.Tensor:
        """Codes 1..15 of a frame from the talker's hidden state [B,H] and code0 [B] -> [B,15].

        A fresh 16-position cache per frame: [hidden, C(code0), E1(code1), ...] at positions 0..15;
        `pick` turns each head's logits into codes (greedy, sampled, or teacher-forced).
        """
        cp = self.code_predictor
        b, dev = hidden.shape[0], hidden.device
        steps = cp.cfg.num_code_groups - 1
        cache = ContiguousKVCache(cp.cfg.num_hidden_layers)
        embeds = torch.stack([hidden, self.embed_codec(code0)], dim=1)
        h = cp(
            embeds, torch.arange(2, device=dev).expand(b, 2), cache.step(torch.ones(b, 2, dtype=torch.bool, device=dev))
        )
        codes = []
        for j in range(steps):
            code = pick(j, cp.lm_head[j](h[:, -1]).float())
            codes.append(code)
            if j + 1 < steps:
                pos = torch.full((b, 1), j + 2, device=dev)
                valid = torch.ones(b, 1, dtype=torch.bool, device=dev)
                h = cp(cp.model.codec_embedding[j](code)[:, None], pos, cache.step(valid))
        return torch.stack(codes, dim=1)


class Qwen3TTSTalkerModel(nn.Module):
    """Root of the talker checkpoint (`model.safetensors`): the single child `talker`."""

    def __init__(self, cfg: Qwen3TTSConfig):
        super().__init__()
        self.talker = Talker(cfg.talker)
