"""PyTorch's Llama decoder (harness/llama.py's shapes): the module names and layouts of Hugging Face's
LlamaForCausalLM without its `model.` prefix, so that one state dict loads into either (hf_state_dict), which is
how tests/test_llama.py checks that both give the same logits and loss.

Attention is F.scaled_dot_product_attention(is_causal=True, enable_gqa=True): PyTorch picks its fused kernel
(FlashAttention or cuDNN on CUDA, the flash CPU kernel on CPU) and the key/value heads are shared by groups of
query heads without being copied. RMSNorm computes in fp32 and casts back, as Hugging Face's does, so bf16
autocast leaves it exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...llama import LlamaConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_tables(cfg: LlamaConfig, seq_length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, [seq_length, head_dim] in fp32 (rotate-half layout: each frequency twice)."""
    half = torch.arange(0, cfg.head_dim, 2, dtype=torch.float32, device=device) / cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta**half)
    angles = torch.outer(torch.arange(seq_length, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [batch, heads, seq, head_dim]; the tables cast to x's dtype (bf16 under autocast), as Hugging Face does."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        h, kv = cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, kv, bias=False)
        self.v_proj = nn.Linear(h, kv, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.mlp = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """forward(tokens [batch, seq + 1]) -> the mean next-token cross entropy over all batch x seq positions."""

    def __init__(self, cfg: LlamaConfig, activation_checkpointing: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.activation_checkpointing = activation_checkpointing
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))  # FSDP2 shards each
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, initializer_range) for every matrix, ones for the norms (Hugging Face's init)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=self.cfg.initializer_range)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[batch, seq, vocabulary] for input_ids [batch, seq]."""
        cos, sin = rope_tables(self.cfg, input_ids.shape[1], input_ids.device)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            if self.activation_checkpointing and self.training:
                # Only the layer's input is kept; its activations are recomputed in the backward pass.
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.logits(tokens[:, :-1])
        # fp32 cross entropy (logits upcast, as Hugging Face's loss does under autocast)
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters, a tied weight once (model.parameters() yields each tensor once)."""
    return sum(p.numel() for p in model.parameters())


def hf_state_dict(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """The state dict under Hugging Face's LlamaForCausalLM names (model.<...>, lm_head.weight)."""
    return {(k if k.startswith("lm_head.") else f"model.{k}"): v for k, v in model.state_dict().items()}


def make_optimizer(model: nn.Module, settings: dict, fused: bool) -> torch.optim.AdamW:
    """AdamW (llama.ADAMW): fused where the parameters allow it (plain tensors on CPU or CUDA, or FSDP2's on CUDA),
    else PyTorch's foreach implementation."""
    return torch.optim.AdamW(model.parameters(), **settings, fused=fused or None, foreach=None if fused else True)
