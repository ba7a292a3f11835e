"""Google's BERT pretraining model (harness/bert.py) in PaddlePaddle, written from paddle.nn (PaddleNLP does not
import with today's dependencies), its canonical weight layout and the optimizers the benchmark trains it with.

The same model as every backend's: post-LayerNorm layers, attention softmax(Q K^T / sqrt(d) + (1 - mask) * -10000)
with dropout on the probabilities through F.scaled_dot_product_attention (its math kernel on a CPU, exactly that;
a fused kernel where the device has one), GELU's tanh form, the masked-LM head only at the masked positions with
its decoder tied to the word embeddings, next-sentence head on the pooled [CLS]; loss = weighted masked-LM NLL /
(sum of weights + 1e-5) + next-sentence cross entropy, in float32 (the masked-LM NLL through F.cross_entropy's
fused kernel). A Paddle Linear's weight is [in, out]: Google's kernel as stored.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from ... import bert

MASK_ADDEND = -10000.0  # Google's additive attention mask at padding


def truncated_normal(shape: tuple[int, ...], std: float, rng: np.random.Generator) -> np.ndarray:
    """normal(0, std) truncated at 2 std (tf.truncated_normal), by redrawing the values outside."""
    values = rng.standard_normal(shape, dtype=np.float32)
    outside = np.abs(values) > 2
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()), dtype=np.float32)
        outside = np.abs(values) > 2
    return values * np.float32(std)


class Embeddings(nn.Layer):
    def __init__(self, cfg: bert.BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, input_ids: paddle.Tensor, segment_ids: paddle.Tensor) -> paddle.Tensor:
        positions = self.position_embeddings.weight[: input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + positions + self.token_type_embeddings(segment_ids)
        return self.dropout(self.LayerNorm(x))


class Layer(nn.Layer):
    """One post-LayerNorm transformer layer."""

    def __init__(self, cfg: bert.BertConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.heads, self.head_size = cfg.num_heads, cfg.head_size
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attention_dropout = nn.Dropout(cfg.attention_dropout)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, epsilon=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(h, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, h)
        self.output_norm = nn.LayerNorm(h, epsilon=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def _split(self, x: paddle.Tensor) -> paddle.Tensor:  # [B, S, H] -> [B, S, heads, head_size] (Paddle's layout)
        return x.reshape([0, 0, self.heads, self.head_size])

    def forward(self, x: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        p = self.attention_dropout.p if self.training else 0.0
        mask = mask.astype(q.dtype)  # auto_cast leaves the additive mask in float32
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, training=self.training)
        context = context.flatten(2)
        x = self.attention_norm(x + self.dropout(self.attention_output(context)))
        y = self.output(F.gelu(self.intermediate(x), approximate=True))
        return self.output_norm(x + self.dropout(y))


class BertForPreTraining(nn.Layer):
    """BERT encoder + pooler + masked-LM head (decoder tied to the word embeddings) + next-sentence head.

    forward(batch features as tensors) -> (mlm_logits [B, P, V], nsp_logits [B, 2], loss)."""

    def __init__(self, cfg: bert.BertConfig, seed: int = 0) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.LayerList([Layer(cfg) for _ in range(cfg.num_layers)])
        self.pooler = nn.Linear(h, h)
        self.transform = nn.Linear(h, h)
        self.transform_norm = nn.LayerNorm(h, epsilon=cfg.layer_norm_eps)
        self.output_bias = self.create_parameter([cfg.vocab_size], is_bias=True)
        self.seq_relationship = nn.Linear(h, 2)  # weight [H, 2]: Google's output_weights transposed
        self.reset_parameters(seed)

    def reset_parameters(self, seed: int) -> None:
        """Google's initialisation: truncated normal(0.02) weights, zero biases, LayerNorm 1 and 0 (numpy's
        generator, seeded: each rank's model is the same, as DataParallel requires)."""
        rng = np.random.default_rng(seed)
        std = self.cfg.initializer_range
        with paddle.no_grad():
            for layer in self.sublayers():
                if isinstance(layer, (nn.Linear, nn.Embedding)):
                    layer.weight.set_value(truncated_normal(tuple(layer.weight.shape), std, rng))
                if isinstance(layer, nn.Linear):
                    layer.bias.set_value(np.zeros(layer.bias.shape, np.float32))
                elif isinstance(layer, nn.LayerNorm):
                    layer.weight.set_value(np.ones(layer.weight.shape, np.float32))
                    layer.bias.set_value(np.zeros(layer.bias.shape, np.float32))
            self.output_bias.set_value(np.zeros(self.output_bias.shape, np.float32))

    def forward(
        self,
        input_ids: paddle.Tensor,
        input_mask: paddle.Tensor,
        segment_ids: paddle.Tensor,
        masked_lm_positions: paddle.Tensor,
        masked_lm_ids: paddle.Tensor,
        masked_lm_weights: paddle.Tensor,
        next_sentence_labels: paddle.Tensor,
    ) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        x = self.embeddings(input_ids, segment_ids)
        # [B, 1, 1, S], broadcast over heads and queries
        mask = (1.0 - input_mask.astype("float32").unsqueeze([1, 2])) * MASK_ADDEND
        for layer in self.layers:
            x = layer(x, mask)
        pooled = paddle.tanh(self.pooler(x[:, 0]))
        # masked-LM head only at the masked positions: [B, P, H]
        index = masked_lm_positions.unsqueeze(-1).expand([-1, -1, x.shape[-1]])
        y = F.gelu(self.transform(paddle.take_along_axis(x, index, axis=1)), approximate=True)
        y = self.transform_norm(y)
        mlm_logits = paddle.matmul(y, self.embeddings.word_embeddings.weight, transpose_y=True) + self.output_bias
        nsp_logits = self.seq_relationship(pooled)
        # -log softmax at the label, by cross_entropy's fused kernel: Paddle's CPU log_softmax over the vocabulary
        # took 0.6 s forward and 1.3 s backward for BERT-Tiny's [2, 5, 30522] logits, cross_entropy 0.9 ms
        nll = F.cross_entropy(
            mlm_logits.astype("float32").flatten(0, 1), masked_lm_ids.flatten(), reduction="none"
        ).reshape(masked_lm_ids.shape)
        weights = masked_lm_weights.astype("float32")
        mlm_loss = (weights * nll).sum() / (weights.sum() + 1e-5)
        nsp_loss = F.cross_entropy(nsp_logits.astype("float32"), next_sentence_labels)
        return mlm_logits, nsp_logits, mlm_loss + nsp_loss


# ------------------------------------------------------------------------- canonical weights
def canonical_parameters(model: BertForPreTraining) -> dict[str, tuple[paddle.Tensor, bool]]:
    """Google checkpoint name -> (parameter, stored transposed), by bert.module_parameter_names: Paddle keeps Linear
    weights [in, out], as Google's kernels, so only the next-sentence output_weights ([out, in]) are transposed."""
    named = dict(model.named_parameters())
    layout = bert.module_parameter_names(model.cfg)
    return {name: (named[dotted], stored == bert.OUT_IN) for name, (dotted, stored) in layout.items()}


def load_canonical(model: BertForPreTraining, weights: dict[str, np.ndarray]) -> None:
    """Copy canonical weights (bert.canonical_shapes names and shapes) into the model; every one is needed."""
    params = canonical_parameters(model)
    if missing := sorted(params.keys() - weights.keys()):
        raise KeyError(f"canonical weights missing: {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    with paddle.no_grad():
        for name, (param, transposed) in params.items():
            value = np.asarray(weights[name], np.float32)
            param.set_value(np.ascontiguousarray(value.T) if transposed else value)


def batch_tensors(batch: dict[str, np.ndarray], place: paddle.core.Place | None = None) -> dict[str, paddle.Tensor]:
    """A bert.synthetic_batch as tensors: ids as int64 (what take_along_axis and cross_entropy take), float32
    weights."""
    return {
        name: paddle.to_tensor(np.asarray(value, np.float32 if value.dtype.kind == "f" else np.int64), place=place)
        for name, value in batch.items()
    }


def pretraining_outputs(
    cfg: bert.BertConfig, weights: dict[str, np.ndarray], batch: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(mlm_logits, nsp_logits, loss) for canonical weights and a batch: fp32, dropout off (bert_logits CLI)."""
    paddle.set_device("cpu")
    model = BertForPreTraining(cfg)
    model.eval()
    load_canonical(model, weights)
    with paddle.no_grad():
        mlm, nsp, loss = model(**batch_tensors(batch))
    return mlm.numpy(), nsp.numpy(), float(loss)


# ------------------------------------------------------------------------- optimizers
OPTIMIZER_NAMES = {
    "adam": "AdamW (paddle.optimizer.AdamW; decoupled weight decay, bias-corrected: Google's AdamWeightDecay has "
    "no bias correction)",
    "lamb": "LAMB (paddle.optimizer.Lamb, bias-corrected, trust ratio on every tensor: always_adapt)",
}


def make_optimizer(
    model: BertForPreTraining,
    name: str,
    settings: bert.OptimizerSettings,
    parameters: list | None = None,
    grad_clip: nn.ClipGradByGlobalNorm | None = None,
) -> tuple[paddle.optimizer.Optimizer, paddle.optimizer.lr.LambdaDecay]:
    """Adam with decoupled weight decay ("adam") or LAMB ("lamb") with `settings`, LayerNorm and biases without
    weight decay (bert.excluded_from_weight_decay on the canonical names), and its schedule (bert.learning_rate
    per 0-based step: the scheduler's step() after each update). parameters: those to update (default: the model's;
    under DataParallel the same tensors)."""
    excluded = {id(p) for n, (p, _) in canonical_parameters(model).items() if bert.excluded_from_weight_decay(n)}
    schedule = paddle.optimizer.lr.LambdaDecay(
        settings.learning_rate, lambda step: bert.learning_rate(settings, step) / settings.learning_rate
    )
    common = dict(
        learning_rate=schedule,
        beta1=settings.beta1,
        beta2=settings.beta2,
        epsilon=settings.epsilon,
        parameters=parameters if parameters is not None else model.parameters(),
        grad_clip=grad_clip,
    )
    if name == "adam":
        names = {p.name for p in model.parameters() if id(p) not in excluded}
        optimizer = paddle.optimizer.AdamW(
            weight_decay=settings.weight_decay, apply_decay_param_fun=lambda n: n in names, **common
        )
    elif name == "lamb":
        optimizer = paddle.optimizer.Lamb(
            lamb_weight_decay=settings.weight_decay,
            exclude_from_weight_decay_fn=lambda p: id(p) in excluded,
            always_adapt=True,
            **common,
        )
    else:
        raise ValueError(f"no BERT optimizer {name!r} (adam, lamb)")
    return optimizer, schedule
