"""BERT pretraining (Google's BertForPreTraining, see harness/bert.py) as a Gluon HybridBlock (MXNet 1.9).

Post-LN encoder, GELU in its tanh approximation written out (Gluon's `LeakyReLU(act_type='gelu')` is the
erf form), attention mask adding -10000 at padding, tanh pooler, masked-LM head evaluated only at the
masked positions, next-sentence head. One Parameter holds the word embeddings and is used twice, by the
input lookup and by the masked-LM decoder (tied), so it is counted and updated once. `load_canonical`
maps Google's checkpoint names onto the net (dense kernels [in, out] become Gluon's [out, in]).

Also here, for the backend and the benchmark: Google's AdamWeightDecay on MXNet's `adamw_update` kernel,
the optimizers by name with LayerNorm and biases excluded from weight decay (wd_mult 0).
"""

from __future__ import annotations

import math

import mxnet as mx
import numpy as np
from mxnet import gluon, init
from mxnet.gluon import nn

from ... import bert
from ...weights import check_names, check_shape

GELU_SCALE = math.sqrt(2.0 / math.pi)
MASK_ADDER = -10000.0  # added to the attention scores at padding, as Google's BERT


def gelu(F, x):
    """GELU, tanh approximation (Google's BERT): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + F.tanh(GELU_SCALE * (x + 0.044715 * x * x * x)))


def _dense(cfg: bert.BertConfig, units: int, in_units: int, activation: str | None = None) -> nn.Dense:
    return nn.Dense(
        units,
        in_units=in_units,
        flatten=False,
        activation=activation,
        weight_initializer=init.Normal(cfg.initializer_range),
    )


def _layer_norm(cfg: bert.BertConfig) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=cfg.layer_norm_eps, in_channels=cfg.hidden_size)


class EncoderLayer(gluon.HybridBlock):
    """Self-attention and feed-forward, each followed by dropout, the residual and LayerNorm (post-LN)."""

    def __init__(self, cfg: bert.BertConfig, **kwargs) -> None:
        super().__init__(**kwargs)
        h, i = cfg.hidden_size, cfg.intermediate_size
        self._heads = cfg.num_heads
        self._scale = 1.0 / math.sqrt(cfg.head_size)
        with self.name_scope():
            self.query, self.key, self.value = _dense(cfg, h, h), _dense(cfg, h, h), _dense(cfg, h, h)
            self.attention_dropout = nn.Dropout(cfg.attention_dropout)
            self.attention_output = _dense(cfg, h, h)
            self.attention_output_dropout = nn.Dropout(cfg.hidden_dropout)
            self.attention_norm = _layer_norm(cfg)
            self.intermediate = _dense(cfg, i, h)
            self.output = _dense(cfg, h, i)
            self.output_dropout = nn.Dropout(cfg.hidden_dropout)
            self.output_norm = _layer_norm(cfg)

    def hybrid_forward(self, F, x, mask_adder):
        # x [B, S, H]; mask_adder [B, 1, 1, S]. Heads fold into the batch: [B*N, S, D] (reshape codes:
        # 0 keeps a dimension, -4 splits one in two, -3 merges two).
        n = self._heads

        def split_heads(t):
            return t.reshape((0, 0, -4, n, -1)).transpose((0, 2, 1, 3)).reshape((-3, 0, 0))

        q, k, v = split_heads(self.query(x)), split_heads(self.key(x)), split_heads(self.value(x))
        scores = F.batch_dot(q, k, transpose_b=True) * self._scale  # [B*N, S, S]
        scores = F.broadcast_add(scores.reshape((-4, -1, n, 0, 0)), mask_adder)  # [B, N, S, S]
        probs = self.attention_dropout(F.softmax(scores, axis=-1))
        context = F.batch_dot(probs.reshape((-3, 0, 0)), v)  # [B*N, S, D]
        context = context.reshape((-4, -1, n, 0, 0)).transpose((0, 2, 1, 3)).reshape((0, 0, -3))  # [B, S, H]
        x = self.attention_norm(x + self.attention_output_dropout(self.attention_output(context)))
        y = self.output(gelu(F, self.intermediate(x)))
        return self.output_norm(x + self.output_dropout(y))


class BertForPreTraining(gluon.HybridBlock):
    """(input_ids, input_mask, segment_ids, masked_lm_positions) -> (mlm_logits [B, P, V], nsp_logits [B, 2])."""

    def __init__(self, cfg: bert.BertConfig, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        h, v = cfg.hidden_size, cfg.vocab_size
        normal = init.Normal(cfg.initializer_range)
        with self.name_scope():
            # the tied word embeddings: one Parameter, read by the lookup and by the masked-LM decoder
            self.word_embeddings = self.params.get("word_embeddings", shape=(v, h), init=normal)
            self.position_embeddings = self.params.get(
                "position_embeddings", shape=(cfg.max_position_embeddings, h), init=normal
            )
            self.token_type_embeddings = self.params.get(
                "token_type_embeddings", shape=(cfg.type_vocab_size, h), init=normal
            )
            self.embeddings_norm = _layer_norm(cfg)
            self.embeddings_dropout = nn.Dropout(cfg.hidden_dropout)
            self.encoder = nn.HybridSequential()
            for _ in range(cfg.num_layers):
                self.encoder.add(EncoderLayer(cfg))
            self.pooler = _dense(cfg, h, h, activation="tanh")
            self.mlm_transform = _dense(cfg, h, h)
            self.mlm_norm = _layer_norm(cfg)
            self.mlm_output_bias = self.params.get("mlm_output_bias", shape=(v,), init="zeros")
            self.nsp_weights = self.params.get("nsp_weights", shape=(2, h), init=normal)  # [out, in]
            self.nsp_bias = self.params.get("nsp_bias", shape=(2,), init="zeros")

    def hybrid_forward(
        self,
        F,
        input_ids,
        input_mask,
        segment_ids,
        masked_lm_positions,
        word_embeddings,
        position_embeddings,
        token_type_embeddings,
        mlm_output_bias,
        nsp_weights,
        nsp_bias,
    ):
        cfg = self.cfg
        h, v = cfg.hidden_size, cfg.vocab_size
        positions = F.contrib.arange_like(input_ids, axis=1)  # [S]
        x = F.Embedding(input_ids, word_embeddings, input_dim=v, output_dim=h)
        x = x + F.Embedding(segment_ids, token_type_embeddings, input_dim=cfg.type_vocab_size, output_dim=h)
        x = F.broadcast_add(
            x,
            F.Embedding(
                positions, position_embeddings, input_dim=cfg.max_position_embeddings, output_dim=h
            ).expand_dims(axis=0),
        )
        x = self.embeddings_dropout(self.embeddings_norm(x))
        mask_adder = (1.0 - F.cast(input_mask, "float32")).reshape((0, 1, 1, -1)) * MASK_ADDER
        for i in range(len(self.encoder)):
            x = self.encoder[i](x, mask_adder)
        pooled = self.pooler(F.slice_axis(x, axis=1, begin=0, end=1).reshape((0, -1)))  # first token
        nsp_logits = F.FullyConnected(pooled, nsp_weights, nsp_bias, num_hidden=2)
        # the sequence output at the masked positions: [B, P, H], by (row, position) index pairs
        rows = F.broadcast_like(
            F.contrib.arange_like(masked_lm_positions, axis=0).reshape((-1, 1)), masked_lm_positions
        )  # arange_like keeps the positions' dtype (int32)
        picked = F.gather_nd(x, F.stack(rows, masked_lm_positions, axis=0))
        picked = self.mlm_norm(gelu(F, self.mlm_transform(picked)))
        mlm_logits = F.FullyConnected(picked, word_embeddings, mlm_output_bias, num_hidden=v, flatten=False)
        return mlm_logits, nsp_logits

    def canonical_parameters(self) -> dict[str, tuple[gluon.Parameter, bool]]:
        """Google checkpoint name -> (Parameter, whether the canonical value is its transpose)."""
        out: dict[str, tuple[gluon.Parameter, bool]] = {
            "bert/embeddings/word_embeddings": (self.word_embeddings, False),
            "bert/embeddings/token_type_embeddings": (self.token_type_embeddings, False),
            "bert/embeddings/position_embeddings": (self.position_embeddings, False),
        }

        def dense(name: str, layer: nn.Dense) -> None:
            out[f"{name}/kernel"] = (layer.weight, True)  # Google [in, out], Gluon [out, in]
            out[f"{name}/bias"] = (layer.bias, False)

        def norm(name: str, layer: nn.LayerNorm) -> None:
            out[f"{name}/gamma"] = (layer.gamma, False)
            out[f"{name}/beta"] = (layer.beta, False)

        norm("bert/embeddings/LayerNorm", self.embeddings_norm)
        for i in range(len(self.encoder)):
            layer, p = self.encoder[i], f"bert/encoder/layer_{i}"
            dense(f"{p}/attention/self/query", layer.query)
            dense(f"{p}/attention/self/key", layer.key)
            dense(f"{p}/attention/self/value", layer.value)
            dense(f"{p}/attention/output/dense", layer.attention_output)
            norm(f"{p}/attention/output/LayerNorm", layer.attention_norm)
            dense(f"{p}/intermediate/dense", layer.intermediate)
            dense(f"{p}/output/dense", layer.output)
            norm(f"{p}/output/LayerNorm", layer.output_norm)
        dense("bert/pooler/dense", self.pooler)
        dense("cls/predictions/transform/dense", self.mlm_transform)
        norm("cls/predictions/transform/LayerNorm", self.mlm_norm)
        out["cls/predictions/output_bias"] = (self.mlm_output_bias, False)
        out["cls/seq_relationship/output_weights"] = (self.nsp_weights, False)  # [2, H] in both
        out["cls/seq_relationship/output_bias"] = (self.nsp_bias, False)
        return out


class PretrainingLoss(gluon.HybridBlock):
    """Masked-LM cross entropy weighted by masked_lm_weights + mean next-sentence cross entropy (scalar [1])."""

    def hybrid_forward(self, F, mlm_logits, nsp_logits, masked_lm_ids, masked_lm_weights, next_sentence_labels):
        mlm_nll = -F.pick(F.log_softmax(mlm_logits, axis=-1), masked_lm_ids, axis=-1)  # [B, P]
        mlm = F.sum(masked_lm_weights * mlm_nll) / (F.sum(masked_lm_weights) + 1e-5)
        nsp = -F.mean(F.pick(F.log_softmax(nsp_logits, axis=-1), next_sentence_labels, axis=-1))
        return mlm + nsp


INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
LABELS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def build(cfg: bert.BertConfig, ctx: mx.Context | None = None) -> BertForPreTraining:
    net = BertForPreTraining(cfg)
    net.initialize(ctx=ctx or mx.cpu())
    return net


def parameter_count(net: gluon.Block) -> int:
    """Trainable parameters; collect_params() holds the tied word embeddings once."""
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")


def load_canonical(net: BertForPreTraining, weights: dict[str, np.ndarray]) -> None:
    """Set every parameter from Google-named weights (bert.canonical_shapes); names must match exactly."""
    params = net.canonical_parameters()
    check_names(params, weights, "BERT")
    for name, (param, transpose) in params.items():
        value = np.asarray(weights[name], dtype=np.float32)
        value = value.T if transpose else value
        check_shape(name, value.shape, param.shape)
        param.set_data(mx.nd.array(value, dtype=param.dtype))


def exclude_from_weight_decay(net: BertForPreTraining) -> None:
    """wd_mult 0 on LayerNorm parameters and biases (by their canonical names, as Google's optimizer)."""
    for name, (param, _) in net.canonical_parameters().items():
        param.wd_mult = 0.0 if bert.excluded_from_weight_decay(name) else 1.0


def arrays(batch: dict[str, np.ndarray], ctx: mx.Context) -> tuple[list[mx.nd.NDArray], list[mx.nd.NDArray]]:
    """(model inputs, loss labels) of a bert.synthetic_batch, on ctx, in the order the blocks take them."""

    def put(name: str) -> mx.nd.NDArray:
        return mx.nd.array(batch[name], ctx=ctx, dtype=batch[name].dtype)

    return [put(n) for n in INPUTS], [put(n) for n in LABELS]


def pretraining_outputs(
    cfg: bert.BertConfig, weights: dict[str, np.ndarray], batch: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(mlm_logits, nsp_logits, loss) for canonical weights, fp32, dropout off (no autograd.record)."""
    net = build(cfg)
    load_canonical(net, weights)
    inputs, labels = arrays(batch, mx.cpu())
    mlm, nsp = net(*inputs)  # outside autograd.record(): inference mode, dropout off
    loss = PretrainingLoss()(mlm, nsp, *labels)
    return mlm.asnumpy(), nsp.asnumpy(), float(loss.asscalar())


# ----------------------------------------------------------------------------- optimizers
class AdamWeightDecay(mx.optimizer.Optimizer):
    """Google BERT's AdamWeightDecay: Adam without bias correction, the weight decay added to the update
    (decoupled from the gradient's moments), on MXNet's fused kernel `adamw_update`, which computes
        w -= eta * (lr * m / (sqrt(v) + eps) + wd * w)
    so eta carries the learning rate (with lr_mult) and lr is 1: w -= lr_t * (m / (sqrt(v) + eps) + wd * w).
    Per-parameter weight decay through Parameter.wd_mult."""

    def __init__(
        self, learning_rate: float = 1e-4, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-6, **kwargs
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index, weight):
        return (
            mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),
            mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),
        )

    def update(self, index, weight, grad, state):
        self._update_count(index)
        mean, var = state
        mx.nd.contrib.adamw_update(
            weight,
            grad,
            mean,
            var,
            rescale_grad=self.rescale_grad,
            lr=1.0,
            eta=self._get_lr(index),
            wd=self._get_wd(index),
            beta1=self.beta1,
            beta2=self.beta2,
            epsilon=self.epsilon,
            clip_gradient=self.clip_gradient or -1.0,
            out=weight,
        )


OPTIMIZER_NAMES = {
    "adam": "AdamWeightDecay (Google BERT's: decoupled weight decay, no bias correction; mx adamw_update)",
    "lamb": "LAMB (mx.optimizer.LAMB, bias correction)",
}


def optimizer(name: str) -> mx.optimizer.Optimizer:
    """The optimizer `name` ('adam' | 'lamb') with bert.OPTIMIZERS[name]; the Trainer sets the LR per step."""
    s = bert.OPTIMIZERS[name]
    common = {
        "learning_rate": s.learning_rate,
        "beta1": s.beta1,
        "beta2": s.beta2,
        "epsilon": s.epsilon,
        "wd": s.weight_decay,
    }
    if name == "adam":
        return AdamWeightDecay(**common)
    if name == "lamb":
        return mx.optimizer.LAMB(bias_correction=True, **common)
    raise ValueError(f"no BERT optimizer {name!r} (adam | lamb)")
