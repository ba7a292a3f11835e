"""Google's BERT pretraining model (harness/bert.py) in Flax (linen), its canonical weight layout, and the Optax
optimizers the benchmark trains it with.

The modules are named as Google's checkpoint scopes (bert/embeddings, bert/encoder/layer_<i>/attention/self/query,
cls/predictions, ...) and their parameters as its variables (kernel [in, out], bias, LayerNorm gamma/beta), so the
Flax parameter tree flattened with '/' *is* the canonical layout (bert.canonical_shapes): `canonical(params)` and
`from_canonical(weights)` only flatten and nest. The decoder is tied to the word embeddings.

Attention is spelled out as Google's: softmax(Q K^T / sqrt(d) + (1 - mask) * -10000) with dropout on the
probabilities. Under AMP the matrix products run in bfloat16 (`dtype`), parameters stay float32; LayerNorm,
softmax and the losses compute in float32.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from ... import bert, weights

MASK_ADDEND = -10000.0  # Google's additive attention mask at padding


def truncated_normal(std: float):
    """normal(0, std) truncated at 2 std (tf.truncated_normal)."""
    return lambda key, shape, dtype=jnp.float32: std * jax.random.truncated_normal(key, -2.0, 2.0, shape, dtype)


class LayerNorm(nn.Module):
    """Google's LayerNorm with its variable names (gamma, beta), in float32 whatever the input's dtype."""

    eps: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        size = x.shape[-1]
        gamma = self.param("gamma", nn.initializers.ones, (size,))
        beta = self.param("beta", nn.initializers.zeros, (size,))
        y = x.astype(jnp.float32)
        mean = y.mean(-1, keepdims=True)
        var = jnp.square(y - mean).mean(-1, keepdims=True)
        return ((y - mean) * jax.lax.rsqrt(var + self.eps) * gamma + beta).astype(x.dtype)


def dense(features: int, cfg: bert.BertConfig, dtype: jnp.dtype, name: str) -> nn.Dense:
    """Google's dense layer: kernel [in, out] truncated normal(initializer_range), bias 0."""
    return nn.Dense(features, kernel_init=truncated_normal(cfg.initializer_range), dtype=dtype, name=name)


class SelfAttention(nn.Module):
    """attention/self: query, key, value and the attention itself (dropout on the probabilities)."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array, train: bool) -> jax.Array:
        cfg = self.cfg
        batch, length, _ = x.shape

        def heads(name: str) -> jax.Array:  # [B, S, H] -> [B, heads, S, head_size]
            y = dense(cfg.hidden_size, cfg, self.dtype, name)(x)
            return y.reshape(batch, length, cfg.num_heads, cfg.head_size).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = (q @ k.transpose(0, 1, 3, 2)).astype(jnp.float32) * (1.0 / math.sqrt(cfg.head_size)) + mask
        probs = nn.Dropout(cfg.attention_dropout, deterministic=not train)(jax.nn.softmax(scores, -1))
        context = probs.astype(v.dtype) @ v
        return context.transpose(0, 2, 1, 3).reshape(batch, length, cfg.hidden_size)


class DenseNorm(nn.Module):
    """attention/output and output: LayerNorm(residual + dropout(dense(x)))."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, residual: jax.Array, train: bool) -> jax.Array:
        y = nn.Dropout(self.cfg.hidden_dropout, deterministic=not train)(
            dense(self.cfg.hidden_size, self.cfg, self.dtype, "dense")(x)
        )
        return LayerNorm(self.cfg.layer_norm_eps, name="LayerNorm")(residual + y)


class Attention(nn.Module):
    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array, train: bool) -> jax.Array:
        context = SelfAttention(self.cfg, self.dtype, name="self")(x, mask, train)
        return DenseNorm(self.cfg, self.dtype, name="output")(context, x, train)


class Intermediate(nn.Module):
    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.gelu(dense(self.cfg.intermediate_size, self.cfg, self.dtype, "dense")(x), approximate=True)


class Layer(nn.Module):
    """One post-LayerNorm transformer layer (bert/encoder/layer_<i>)."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array, train: bool) -> jax.Array:
        x = Attention(self.cfg, self.dtype, name="attention")(x, mask, train)
        y = Intermediate(self.cfg, self.dtype, name="intermediate")(x)
        return DenseNorm(self.cfg, self.dtype, name="output")(y, x, train)


class Encoder(nn.Module):
    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array, train: bool) -> jax.Array:
        for i in range(self.cfg.num_layers):
            x = Layer(self.cfg, self.dtype, name=f"layer_{i}")(x, mask, train)
        return x


class Embeddings(nn.Module):
    """bert/embeddings: word, position and token-type embeddings, LayerNorm, dropout."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    def setup(self) -> None:
        cfg, init = self.cfg, truncated_normal(self.cfg.initializer_range)
        self.word_embeddings = self.param("word_embeddings", init, (cfg.vocab_size, cfg.hidden_size))
        self.token_type_embeddings = self.param("token_type_embeddings", init, (cfg.type_vocab_size, cfg.hidden_size))
        self.position_embeddings = self.param(
            "position_embeddings", init, (cfg.max_position_embeddings, cfg.hidden_size)
        )
        self.LayerNorm = LayerNorm(cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, train: bool) -> jax.Array:
        x = (
            jnp.take(self.word_embeddings, input_ids, axis=0)
            + self.position_embeddings[: input_ids.shape[1]]
            + jnp.take(self.token_type_embeddings, segment_ids, axis=0)
        )
        return self.dropout(self.LayerNorm(x), deterministic=not train).astype(self.dtype)


class Bert(nn.Module):
    """bert/: embeddings, encoder, pooler. Returns (sequence output, pooled output, the word embeddings)."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, features: dict, train: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
        embeddings = Embeddings(self.cfg, self.dtype, name="embeddings")
        x = embeddings(features["input_ids"], features["segment_ids"], train)
        # [B, 1, 1, S]: -10000 at padding, broadcast over heads and queries
        mask = (1.0 - features["input_mask"][:, None, None, :].astype(jnp.float32)) * MASK_ADDEND
        x = Encoder(self.cfg, self.dtype, name="encoder")(x, mask, train)
        pooled = PoolerDense(self.cfg, self.dtype, name="pooler")(x[:, 0])
        return x, pooled, embeddings.word_embeddings


class PoolerDense(nn.Module):
    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, first: jax.Array) -> jax.Array:
        return jnp.tanh(dense(self.cfg.hidden_size, self.cfg, self.dtype, "dense")(first))


class Transform(nn.Module):
    """cls/predictions/transform: dense, GELU, LayerNorm."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = nn.gelu(dense(self.cfg.hidden_size, self.cfg, self.dtype, "dense")(x), approximate=True)
        return LayerNorm(self.cfg.layer_norm_eps, name="LayerNorm")(y)


class Predictions(nn.Module):
    """cls/predictions: the masked-LM head, its decoder the word embeddings (tied) plus output_bias."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array, word_embeddings: jax.Array) -> jax.Array:
        bias = self.param("output_bias", nn.initializers.zeros, (self.cfg.vocab_size,))
        y = Transform(self.cfg, self.dtype, name="transform")(x)
        return (y @ word_embeddings.astype(self.dtype).T).astype(jnp.float32) + bias


class SeqRelationship(nn.Module):
    """cls/seq_relationship: output_weights [2, H] ([out, in], as Google stores it) and output_bias."""

    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, pooled: jax.Array) -> jax.Array:
        h = self.cfg.hidden_size
        w = self.param("output_weights", truncated_normal(self.cfg.initializer_range), (2, h))
        b = self.param("output_bias", nn.initializers.zeros, (2,))
        return (pooled @ w.astype(self.dtype).T).astype(jnp.float32) + b


class Cls(nn.Module):
    cfg: bert.BertConfig
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, masked: jax.Array, pooled: jax.Array, word_embeddings: jax.Array):
        mlm = Predictions(self.cfg, self.dtype, name="predictions")(masked, word_embeddings)
        return mlm, SeqRelationship(self.cfg, self.dtype, name="seq_relationship")(pooled)


class BertPretraining(nn.Module):
    """BERT encoder + pooler + masked-LM head (decoder tied) + next-sentence head.

    __call__(features of bert.FEATURES, train) -> (mlm_logits [B, P, V], nsp_logits [B, 2], loss), float32
    logits and loss; train turns dropout on (it then needs a 'dropout' rng)."""

    cfg: bert.BertConfig
    dtype: jnp.dtype = jnp.float32  # compute dtype (bfloat16 under amp); parameters stay float32

    @nn.compact
    def __call__(self, features: dict, train: bool = True) -> tuple[jax.Array, jax.Array, jax.Array]:
        x, pooled, word_embeddings = Bert(self.cfg, self.dtype, name="bert")(features, train)
        # masked-LM head only at the masked positions: [B, P, H]
        masked = jnp.take_along_axis(x, features["masked_lm_positions"][..., None].astype(jnp.int32), axis=1)
        mlm_logits, nsp_logits = Cls(self.cfg, self.dtype, name="cls")(masked, pooled, word_embeddings)
        return mlm_logits, nsp_logits, pretraining_loss(mlm_logits, nsp_logits, features)


def pretraining_loss(mlm_logits: jax.Array, nsp_logits: jax.Array, features: dict) -> jax.Array:
    """Masked-LM cross entropy weighted by masked_lm_weights + next-sentence cross entropy (float32)."""
    log_probs = jax.nn.log_softmax(mlm_logits.astype(jnp.float32), -1)
    nll = -jnp.take_along_axis(log_probs, features["masked_lm_ids"][..., None].astype(jnp.int32), -1)[..., 0]
    weights = features["masked_lm_weights"].astype(jnp.float32)
    mlm_loss = (weights * nll).sum() / (weights.sum() + 1e-5)
    nsp_loss = optax.softmax_cross_entropy_with_integer_labels(
        nsp_logits.astype(jnp.float32), features["next_sentence_labels"].astype(jnp.int32)
    ).mean()
    return mlm_loss + nsp_loss


# ------------------------------------------------------------------------- canonical weights
def init(model: BertPretraining, key: jax.Array, seq_length: int) -> dict:
    """The model's float32 parameters (Google's initialisation: truncated normal(0.02), zero biases, LayerNorm
    1 and 0)."""
    example = {name: jnp.asarray(value) for name, value in bert.synthetic_batch(model.cfg, 1, seq_length, 1).items()}
    return jax.jit(lambda k: model.init(k, example, train=False))(key)["params"]


def canonical(params: dict) -> dict[str, jax.Array]:
    """Google checkpoint name -> parameter: the tree flattened with '/'."""
    return traverse_util.flatten_dict(params, sep="/")


def from_canonical(cfg: bert.BertConfig, weights_: dict[str, np.ndarray]) -> dict:
    """The parameter tree of canonical weights (bert.canonical_shapes' names and shapes; every one needed)."""
    shapes = bert.canonical_shapes(cfg)
    weights.check_names(shapes, weights_, "the Flax BERT")
    for name, shape in shapes.items():
        weights.check_shape(name, np.shape(weights_[name]), shape)
    return traverse_util.unflatten_dict({k: jnp.asarray(v, jnp.float32) for k, v in weights_.items()}, sep="/")


def parameter_count(params: dict) -> int:
    return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))  # the tied decoder counts once


def batch_arrays(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch as the step takes it: int32 ids, float32 weights (bert.synthetic_batch's dtypes)."""
    return {
        name: np.asarray(value, np.float32 if value.dtype.kind == "f" else np.int32) for name, value in batch.items()
    }


def pretraining_outputs(
    cfg: bert.BertConfig, weights_: dict[str, np.ndarray], batch: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(mlm_logits, nsp_logits, loss) for canonical weights and a batch: fp32, dropout off (bert_logits CLI)."""
    model = BertPretraining(cfg)
    mlm, nsp, loss = model.apply({"params": from_canonical(cfg, weights_)}, batch_arrays(batch), train=False)
    return np.asarray(mlm), np.asarray(nsp), float(loss)


# ------------------------------------------------------------------------- optimizers
OPTIMIZER_NAMES = {
    "adam": "AdamW (optax.adamw; decoupled weight decay, bias-corrected, as the PyTorch backend's)",
    "lamb": "LAMB (optax.lamb: bias-corrected Adam moments, decoupled weight decay, trust ratio on every tensor)",
}


def decay_mask(params: dict) -> dict:
    """True where weight decay applies: not LayerNorm, not biases (bert.excluded_from_weight_decay)."""
    flat = canonical(params)
    return traverse_util.unflatten_dict({name: not bert.excluded_from_weight_decay(name) for name in flat}, sep="/")


def schedule(settings: bert.OptimizerSettings) -> optax.Schedule:
    """bert.learning_rate at Optax's 0-based update count: linear warm-up, then linear decay to 0."""

    def rate(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warm = settings.learning_rate * (step + 1) / settings.warmup_steps
        decay = settings.learning_rate * jnp.maximum(0.0, 1 - step / settings.train_steps)
        return jnp.where(step < settings.warmup_steps, warm, decay)

    return rate


def make_optimizer(
    name: str, params: dict, learning_rate: float | optax.Schedule | None = None, clip_norm: float | None = None
) -> optax.GradientTransformation:
    """AdamW ("adam") or LAMB ("lamb") with bert.OPTIMIZERS[name]'s settings; the learning rate is the schedule
    unless given (a constant; time to quality injects it as a hyperparameter it sets every step). clip_norm:
    clip the gradients by their global norm first."""
    s = bert.OPTIMIZERS[name]
    rate = schedule(s) if learning_rate is None else learning_rate
    mask = decay_mask(params)
    if name == "adam":
        build = lambda learning_rate: optax.adamw(  # noqa: E731
            learning_rate, b1=s.beta1, b2=s.beta2, eps=s.epsilon, weight_decay=s.weight_decay, mask=mask
        )
    elif name == "lamb":
        build = lambda learning_rate: optax.lamb(  # noqa: E731
            learning_rate, b1=s.beta1, b2=s.beta2, eps=s.epsilon, weight_decay=s.weight_decay, mask=mask
        )
    else:
        raise ValueError(f"no BERT optimizer {name!r} (adam, lamb)")
    optimizer = build(rate)
    return optax.chain(optax.clip_by_global_norm(clip_norm), optimizer) if clip_norm else optimizer
