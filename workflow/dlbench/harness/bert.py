"""BERT pretraining, framework-neutral: dimensions, the canonical weight layout, synthetic batches and the
optimizer's hyperparameters (standard library and numpy only; each backend builds its model from these).

The model is Google's BERT (google-research/bert `modeling.py` + `run_pretraining.py`): post-layer-norm
encoder, GELU (tanh approximation, as in Google's code), attention mask adding -10000 at padding, a pooler
(tanh on the first token), a masked-LM head (dense + GELU + LayerNorm, decoder tied to the word embeddings
plus an output bias) evaluated only at the masked positions, and a next-sentence head.
loss = masked-LM cross entropy (weighted by masked_lm_weights) + next-sentence cross entropy.

The canonical weight layout uses the names and shapes of Google's TF checkpoints (dense kernels are
[in, out]); every backend loads it, which is how the cross-framework equivalence test compares them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .spec import is_bert  # noqa: F401 - the backends ask bert.is_bert


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


# BERT-Base as in the paper; BERT-Tiny (L-2, H-128, A-2, Google's compact models) is the same code with
# small dimensions, for tests and smoke runs. Both keep the real 30,522-token uncased vocabulary so that
# real pretraining shards fit either.
CONFIGS = {
    "bert_base": BertConfig(),
    "bert_tiny": BertConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512),
}
BERT_BASE_PARAMETERS = 110_106_428  # BertForPreTraining with the decoder tied: stated in the README, tested
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 101, 102, 103  # bert-base-uncased vocab.txt
FIRST_WORDPIECE_ID = 999  # ids below are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK]


# ------------------------------------------------------------------------- canonical weights
def canonical_shapes(cfg: BertConfig) -> dict[str, tuple[int, ...]]:
    """Every trainable tensor of BertForPreTraining: Google checkpoint name -> shape (kernels [in, out])."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/token_type_embeddings": (cfg.type_vocab_size, h),
        "bert/embeddings/position_embeddings": (cfg.max_position_embeddings, h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
    }
    for layer in range(cfg.num_layers):
        p = f"bert/encoder/layer_{layer}"
        for name in ("query", "key", "value"):
            shapes[f"{p}/attention/self/{name}/kernel"] = (h, h)
            shapes[f"{p}/attention/self/{name}/bias"] = (h,)
        shapes |= {
            f"{p}/attention/output/dense/kernel": (h, h),
            f"{p}/attention/output/dense/bias": (h,),
            f"{p}/attention/output/LayerNorm/gamma": (h,),
            f"{p}/attention/output/LayerNorm/beta": (h,),
            f"{p}/intermediate/dense/kernel": (h, i),
            f"{p}/intermediate/dense/bias": (i,),
            f"{p}/output/dense/kernel": (i, h),
            f"{p}/output/dense/bias": (h,),
            f"{p}/output/LayerNorm/gamma": (h,),
            f"{p}/output/LayerNorm/beta": (h,),
        }
    shapes |= {
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
        "cls/predictions/transform/dense/kernel": (h, h),
        "cls/predictions/transform/dense/bias": (h,),
        "cls/predictions/transform/LayerNorm/gamma": (h,),
        "cls/predictions/transform/LayerNorm/beta": (h,),
        "cls/predictions/output_bias": (v,),
        "cls/seq_relationship/output_weights": (2, h),  # [out, in], as Google stores it
        "cls/seq_relationship/output_bias": (2,),
    }
    return shapes


# Google checkpoint name -> the parameter's dotted name in the module tree PyTorch's and Paddle's BERTs share: these
# rewrites in order (re.sub), e.g. bert/encoder/layer_3/attention/self/query/kernel -> layers.3.query.weight
MODULE_RENAMES = (
    (r"^bert/encoder/layer_(\d+)/", r"layers.\1."),
    (r"attention/self/(query|key|value)/", r"\1."),
    (r"attention/output/dense/", "attention_output."),
    (r"attention/output/LayerNorm/", "attention_norm."),
    (r"intermediate/dense/", "intermediate."),
    (r"output/dense/", "output."),
    (r"output/LayerNorm/", "output_norm."),
    (r"^bert/embeddings/LayerNorm/", "embeddings.LayerNorm."),
    (r"^bert/embeddings/(\w+)$", r"embeddings.\1.weight"),
    (r"^bert/pooler/dense/", "pooler."),
    (r"^cls/predictions/transform/dense/", "transform."),
    (r"^cls/predictions/transform/LayerNorm/", "transform_norm."),
    (r"^cls/predictions/output_bias$", "output_bias"),
    (r"^cls/seq_relationship/output_weights$", "seq_relationship.weight"),
    (r"^cls/seq_relationship/output_bias$", "seq_relationship.bias"),
    (r"\.(kernel|gamma)$", ".weight"),
    (r"\.beta$", ".bias"),
)


IN_OUT, OUT_IN = "in_out", "out_in"  # how Google stores a Linear layer's weight: kernels, next-sentence weights


def module_parameter_names(cfg: BertConfig) -> dict[str, tuple[str, str | None]]:
    """Google checkpoint name -> (the parameter's dotted name in the module tree PyTorch's and Paddle's BERTs share
    (MODULE_RENAMES), how Google stores it if it is a Linear layer's weight: IN_OUT (the kernels) or OUT_IN (the
    next-sentence output_weights); None for any other tensor)."""
    out = {}
    for name in canonical_shapes(cfg):
        dotted = name
        for pattern, replacement in MODULE_RENAMES:
            dotted = re.sub(pattern, replacement, dotted)
        layout = IN_OUT if name.endswith("/kernel") else OUT_IN if name.endswith("/output_weights") else None
        out[name] = (dotted, layout)
    return out


def parameter_count(cfg: BertConfig) -> int:
    return sum(math.prod(shape) for shape in canonical_shapes(cfg).values())


def excluded_from_weight_decay(name: str) -> bool:
    """Google's AdamWeightDecay leaves out LayerNorm and biases (by name)."""
    return "LayerNorm" in name or "layer_norm" in name or name.endswith("bias")


def random_weights(cfg: BertConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Canonical weights as Google initialises them: truncated normal(0.02), LayerNorm 1/0, biases 0.
    Biases and LayerNorm get small random values too, so that an equivalence check sees them."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in canonical_shapes(cfg).items():
        if name.endswith("gamma"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(("beta", "bias")):
            value = 0.02 * rng.standard_normal(shape)
        else:
            value = np.clip(rng.standard_normal(shape), -2, 2) * cfg.initializer_range
        weights[name] = value.astype(np.float32)
    return weights


# ------------------------------------------------------------------------- batches
FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


def synthetic_batch(
    cfg: BertConfig, batch_size: int, seq_length: int, max_predictions: int, seed: int = 0, padding: bool = False
) -> dict[str, np.ndarray]:
    """A batch in Google's feature layout with valid structure: [CLS] A [SEP] B [SEP], segment ids 0/1,
    distinct sorted masked positions inside the real tokens, labels the original ids. int32 ids (every
    framework's embedding takes them), float32 weights; next_sentence_labels has shape [batch].
    With padding, each sequence ends in a random run of [PAD] (input_mask 0), as real shards have."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(FIRST_WORDPIECE_ID, cfg.vocab_size, (batch_size, seq_length), dtype=np.int32)
    mask = np.ones((batch_size, seq_length), np.int32)
    segments = np.zeros((batch_size, seq_length), np.int32)
    positions = np.zeros((batch_size, max_predictions), np.int32)
    labels = np.zeros((batch_size, max_predictions), np.int32)
    weights = np.zeros((batch_size, max_predictions), np.float32)
    for row in range(batch_size):
        length = int(rng.integers(seq_length // 2, seq_length + 1)) if padding else seq_length
        split = int(rng.integers(2, max(3, length - 1)))  # second [SEP] at length - 1
        ids[row, 0], ids[row, split], ids[row, length - 1] = CLS_ID, SEP_ID, SEP_ID
        ids[row, length:] = PAD_ID
        mask[row, length:] = 0
        segments[row, split + 1 : length] = 1
        candidates = [p for p in range(1, length - 1) if p != split]
        count = min(max_predictions, max(1, round(0.15 * length)), len(candidates))
        chosen = np.sort(rng.choice(candidates, count, replace=False))
        positions[row, :count] = chosen
        labels[row, :count] = ids[row, chosen]
        weights[row, :count] = 1.0
        ids[row, chosen] = MASK_ID
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, batch_size, dtype=np.int32),
    }


# ------------------------------------------------------------------------- optimizer
@dataclass(frozen=True)
class OptimizerSettings:
    """Google's run_pretraining.py (Adam with decoupled weight decay) and NVIDIA's LAMB phase-1 values.
    The learning rate warms up linearly over warmup_steps, then decays linearly to 0 at train_steps."""

    learning_rate: float
    warmup_steps: int
    train_steps: int
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-6
    clip_norm: float = 1.0  # global gradient norm, when the grad_clip axis is on


OPTIMIZERS = {
    "adam": OptimizerSettings(learning_rate=1e-4, warmup_steps=10_000, train_steps=1_000_000),
    "lamb": OptimizerSettings(learning_rate=6e-3, warmup_steps=2_000, train_steps=7_038),
}


def learning_rate(settings: OptimizerSettings, step: int) -> float:
    """Linear warm-up then linear decay (Google's polynomial decay with power 1), at a 0-based step."""
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    return settings.learning_rate * max(0.0, 1 - step / settings.train_steps)
