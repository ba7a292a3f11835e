"""Llama-style decoder pretraining, framework-neutral: the published shapes, parameter counts, the FLOP count
MFU uses, synthetic tokens and the optimizer's settings (standard library and numpy only; a backend that
implements the `llama` kind builds its model from these, e.g. backends/pytorch/llama.py).

The model is Meta's Llama 3 decoder as Hugging Face's LlamaForCausalLM implements it: token embedding, per
layer pre-norm RMSNorm -> grouped-query self-attention with rotary embeddings (theta 500,000, the rotate-half
convention, no context-extension scaling: it changes no shape and no FLOP) -> residual, RMSNorm -> SwiGLU
feed-forward (down(silu(gate(x)) * up(x))) -> residual; a final RMSNorm and the output projection over the
vocabulary (tied to the embedding for llama3_1b). No biases, no dropout. Loss: causal language modelling,
the mean cross entropy of every position's next token.

A training sample is a sequence of seq_length tokens (read as seq_length + 1 tokens: inputs and the targets
shifted by one). Throughput is counted in tokens (the unit tokens/s); sequences/s = tokens/s / seq_length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..vocabulary.identity import LLAMA_MODELS


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tie_embeddings: bool
    rope_theta: float = 500_000.0
    norm_eps: float = 1e-5
    initializer_range: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# Published shapes: Llama 3.2 1B and Llama 3.1 8B (Meta's config.json of each). llama_tiny is the same code at
# test size; its 8,192-token vocabulary is the byte-level BPE the workflow trains (dataprep/llama_tokens.py).
CONFIGS: dict[str, LlamaConfig] = {
    "llama_tiny": LlamaConfig(
        vocab_size=8192,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=192,
        tie_embeddings=False,
    ),
    "llama3_1b": LlamaConfig(
        vocab_size=128_256,
        hidden_size=2048,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=8192,
        tie_embeddings=True,
    ),
    "llama3_8b": LlamaConfig(
        vocab_size=128_256,
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14_336,
        tie_embeddings=False,
    ),
}
assert tuple(CONFIGS) == LLAMA_MODELS, "identity.LLAMA_MODELS names the models defined here"
# Published totals (README, tests/test_llama.py): 1.24 B and 8.03 B.
PUBLISHED_PARAMETERS = {"llama3_1b": 1_235_814_400, "llama3_8b": 8_030_261_248}

# AdamW as torchtitan's Llama 3 pretraining sets it (lr 3e-4, betas 0.9/0.95, weight decay 0.1, eps 1e-8); a
# constant rate and no gradient clipping: neither changes the work of a step measurably.
ADAMW = {"lr": 3e-4, "betas": (0.9, 0.95), "weight_decay": 0.1, "eps": 1e-8}


def layer_parameters(cfg: LlamaConfig) -> int:
    """One decoder layer: Q and O (h x h), K and V (h x kv heads x head dim), the SwiGLU triple, two norms."""
    h, kv = cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim
    return 2 * h * h + 2 * h * kv + 3 * h * cfg.intermediate_size + 2 * h


def parameter_count(cfg: LlamaConfig) -> int:
    """Every trainable parameter, the tied embedding counted once."""
    embedding = cfg.vocab_size * cfg.hidden_size
    head = 0 if cfg.tie_embeddings else embedding
    return embedding + cfg.num_layers * layer_parameters(cfg) + cfg.hidden_size + head


def flop_parameters(cfg: LlamaConfig) -> int:
    """N of the 6 N count: the parameters a token is multiplied by, i.e. every parameter but the input embedding
    table (a lookup, no FLOPs); the output projection (vocabulary x hidden) counted once, tied or not. This is
    torchtitan's count (num_params excluding the embedding)."""
    return cfg.num_layers * layer_parameters(cfg) + cfg.hidden_size + cfg.vocab_size * cfg.hidden_size


def train_flops_per_token(model: str, seq_length: int) -> int:
    """Model FLOPs of training on one token, PaLM's appendix B: 6 N (forward 2 N, backward 4 N; N from
    flop_parameters) + 12 x layers x hidden x seq_length (attention scores and weighted sum, forward and
    backward, counted over the whole square, as PaLM and torchtitan do, although a causal kernel skips half).
    Activation checkpointing's recomputed forward is not model FLOPs and is not counted."""
    cfg = CONFIGS[model]
    return 6 * flop_parameters(cfg) + 12 * cfg.num_layers * cfg.hidden_size * seq_length


def synthetic_tokens(cfg: LlamaConfig, batch_size: int, seq_length: int, seed: int) -> np.ndarray:
    """One batch of uniformly random token ids, [batch_size, seq_length + 1] int64 (inputs and shifted targets)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg.vocab_size, size=(batch_size, seq_length + 1), dtype=np.int64)
