"""A GPT-2-style decoder (nanoGPT-like), its standard sizes, and synthetic next-token batches.

Pre-LN blocks with causal self-attention through F.scaled_dot_product_attention, a 4× GELU MLP, a final
LayerNorm, and an lm_head whose weight is the token embedding's. Parameter counts match GPT-2's:
124,439,808 for gpt2 and 354,823,168 for gpt2-medium.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    """The shape of one GPT model."""

    n_layer: int
    """Number of transformer blocks."""
    n_head: int
    """Attention heads per block; must divide n_embd."""
    n_embd: int
    """Width of the residual stream."""
    vocab_size: int = 50257
    """GPT-2's BPE vocabulary. Not padded to a multiple of 64, so parameter counts match GPT-2's."""
    block_size: int = 1024
    """Longest sequence the model takes (the size of the position embedding)."""

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


GPT2 = GPTConfig(n_layer=12, n_head=12, n_embd=768)
GPT2_MEDIUM = GPTConfig(n_layer=24, n_head=16, n_embd=1024)
GPT_TINY = GPTConfig(n_layer=2, n_head=2, n_embd=64, vocab_size=256, block_size=64)

INIT_STD = 0.02  # GPT-2's initialisation: logits start near zero, so the first loss is about ln(vocab_size)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees only itself and earlier positions."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k and v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        # (B, T, C) -> (B, heads, T, C / heads), the layout scaled_dot_product_attention expects
        q, k, v = (t.view(batch, seq, self.n_head, width // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(batch, seq, width))


class MLP(nn.Module):
    """The feed-forward half of a block: widen 4×, GELU, project back."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2 used the tanh approximation
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """One pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token ids (B, T) in, next-token logits (B, T, vocab_size) out."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying as in GPT-2: one parameter, so DDP reduces its gradient once and the counts match.
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        # GPT-2 scales the projections into the residual stream by 1/sqrt(2 * n_layer), so its variance
        # does not grow with depth.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=INIT_STD / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        seq = idx.size(1)
        if seq > self.config.block_size:
            raise ValueError(f"sequence length {seq} exceeds block_size {self.config.block_size}")
        positions = torch.arange(seq, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def make_token_batch(
    batch_size: int, seq_len: int, vocab_size: int, device: torch.device, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids (B, T) and their next-token targets (B, T), both int64.

    Drawn as one (B, T + 1) sequence and shifted by one, as real language-model data is, on the
    generator's device and then moved to `device`.
    """
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=generator, device=generator.device)
    inputs = tokens[:, :-1].contiguous().to(device)
    targets = tokens[:, 1:].contiguous().to(device)
    return inputs, targets
