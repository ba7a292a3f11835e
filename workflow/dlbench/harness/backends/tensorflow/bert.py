"""BERT pretraining in Keras (TensorFlow 2): Google's BERT (see harness/bert.py), written here.

- The model: `BertPretraining(cfg)`, every weight created in the constructor with the shape of its Google
  checkpoint tensor (dense kernels [in, out]); `canonical_variables(model)` maps the Google names to the
  variables, so `load_canonical` loads a canonical weight dict, the optimizer excludes LayerNorm and biases
  from weight decay by those names (`bert.excluded_from_weight_decay`) and the parameter count is exactly
  `bert.parameter_count(cfg)`. The masked-LM decoder is tied to the word embeddings.
- Mixed precision: the layers follow the Keras global policy (bfloat16 / float16 compute, float32
  variables); LayerNorm computes in float32 (Keras does that itself), the logits and the loss are float32.
- Optimizers (`make_optimizer`): "adam" = `keras.optimizers.AdamW`, a standard AdamW (bias-corrected, weight
  decay decoupled: w -= lr * wd * w, as Google's AdamWeightDecay, which has no bias correction); "lamb" =
  `keras.optimizers.Lamb` (bias-corrected, trust ratio ||w|| / ||update|| per tensor; Keras applies the
  decoupled weight decay outside the trust ratio, where the LAMB paper adds it to the update inside it).
  The learning rate is `WarmupLinearDecay`, bert.learning_rate's formula computed in the graph.
- `make_train_step`: the custom `tf.function` step (forward, loss, gradients, optional clipping by global
  norm, update) the TensorFlow backend times.

Runs inside the TensorFlow environment: imports only the standard library, numpy and TensorFlow.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras is Keras 3: make sure it runs on TensorFlow

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from ... import bert  # noqa: E402
from ...bert import BertConfig  # noqa: E402
from ...weights import check_names, check_shape  # noqa: E402

if TYPE_CHECKING:  # the annotations name keras classes: mypy needs the module there, not the variable tf.keras
    from tensorflow import keras
else:
    keras = tf.keras

MASK_ADDER = -10000.0  # Google's attention mask: added to the scores at padding positions
MLM_DENOMINATOR_EPSILON = 1e-5  # Google's run_pretraining.py: sum(weights) + 1e-5


def _initializer(cfg: BertConfig) -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=cfg.initializer_range)


def _dense(cfg: BertConfig, units_in: int, units_out: int, name: str) -> keras.layers.Dense:
    layer = keras.layers.Dense(units_out, kernel_initializer=_initializer(cfg), name=name)
    layer.build((None, units_in))  # weights now: the model is complete before its first call
    return layer


def _layer_norm(cfg: BertConfig, name: str = "LayerNorm") -> keras.layers.LayerNormalization:
    layer = keras.layers.LayerNormalization(epsilon=cfg.layer_norm_eps, name=name)
    layer.build((None, cfg.hidden_size))
    return layer


def gelu(x: tf.Tensor) -> tf.Tensor:
    """Google's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return tf.nn.gelu(x, approximate=True)


class Embeddings(keras.layers.Layer):
    """word + position + token type, LayerNorm, dropout."""

    def __init__(self, cfg: BertConfig, **kwargs) -> None:
        super().__init__(name="embeddings", **kwargs)
        init = _initializer(cfg)
        h = cfg.hidden_size
        self.word_embeddings = self.add_weight(shape=(cfg.vocab_size, h), initializer=init, name="word_embeddings")
        self.token_type_embeddings = self.add_weight(
            shape=(cfg.type_vocab_size, h), initializer=init, name="token_type_embeddings"
        )
        self.position_embeddings = self.add_weight(
            shape=(cfg.max_position_embeddings, h), initializer=init, name="position_embeddings"
        )
        self.type_vocab_size = cfg.type_vocab_size
        self.layer_norm = _layer_norm(cfg)
        self.dropout = keras.layers.Dropout(cfg.hidden_dropout)
        self.built = True

    def call(self, input_ids, segment_ids, training=False):
        x = tf.gather(self.word_embeddings, input_ids)
        # token types as Google's one-hot matmul: a dense gradient (tf.gather's would be IndexedSlices)
        x += tf.matmul(tf.one_hot(segment_ids, self.type_vocab_size, dtype=x.dtype), self.token_type_embeddings)
        x += self.position_embeddings[: tf.shape(input_ids)[1]]
        return self.dropout(self.layer_norm(x), training=training)


class EncoderLayer(keras.layers.Layer):
    """Post-LN transformer layer: self-attention + residual + LayerNorm, feed-forward + residual + LayerNorm."""

    def __init__(self, cfg: BertConfig, index: int, **kwargs) -> None:
        super().__init__(name=f"layer_{index}", **kwargs)
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.heads, self.head_size = cfg.num_heads, cfg.head_size
        self.query = _dense(cfg, h, h, "query")
        self.key = _dense(cfg, h, h, "key")
        self.value = _dense(cfg, h, h, "value")
        self.attention_output = _dense(cfg, h, h, "attention_output")
        self.attention_norm = _layer_norm(cfg, "attention_LayerNorm")
        self.intermediate = _dense(cfg, h, i, "intermediate")
        self.output_dense = _dense(cfg, i, h, "output")
        self.output_norm = _layer_norm(cfg, "output_LayerNorm")
        self.attention_dropout = keras.layers.Dropout(cfg.attention_dropout)
        self.hidden_dropout = [keras.layers.Dropout(cfg.hidden_dropout) for _ in range(2)]
        self.built = True

    def _split_heads(self, x, batch):
        return tf.transpose(tf.reshape(x, [batch, -1, self.heads, self.head_size]), [0, 2, 1, 3])

    def call(self, x, mask_adder, training=False):
        batch = tf.shape(x)[0]
        q = self._split_heads(self.query(x), batch)
        k = self._split_heads(self.key(x), batch)
        v = self._split_heads(self.value(x), batch)
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(self.head_size))
        probs = self.attention_dropout(tf.nn.softmax(scores + tf.cast(mask_adder, scores.dtype)), training=training)
        context = tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]), [batch, -1, self.heads * self.head_size])
        attention = self.hidden_dropout[0](self.attention_output(context), training=training)
        x = self.attention_norm(attention + x)
        ffn = self.hidden_dropout[1](self.output_dense(gelu(self.intermediate(x))), training=training)
        return self.output_norm(ffn + x)


class BertPretraining(keras.Model):
    """features (bert.FEATURES) -> (masked-LM logits [B, P, V], next-sentence logits [B, 2]), float32."""

    def __init__(self, cfg: BertConfig, **kwargs) -> None:
        super().__init__(name="bert_pretraining", **kwargs)
        self.cfg = cfg
        h = cfg.hidden_size
        self.embeddings = Embeddings(cfg)
        self.encoder = [EncoderLayer(cfg, i) for i in range(cfg.num_layers)]
        self.pooler = _dense(cfg, h, h, "pooler")
        self.transform = _dense(cfg, h, h, "transform")
        self.transform_norm = _layer_norm(cfg, "transform_LayerNorm")
        self.output_bias = self.add_weight(shape=(cfg.vocab_size,), initializer="zeros", name="output_bias")
        self.nsp_weights = self.add_weight(shape=(2, h), initializer=_initializer(cfg), name="output_weights")
        self.nsp_bias = self.add_weight(shape=(2,), initializer="zeros", name="seq_relationship_bias")
        self.built = True

    def call(self, features, training=False):
        input_mask = features["input_mask"]
        x = self.embeddings(features["input_ids"], features["segment_ids"], training=training)
        # [B, 1, 1, L]: every query position sees the same keys (Google's mask from the input mask)
        mask_adder = (1.0 - tf.cast(input_mask[:, None, None, :], tf.float32)) * MASK_ADDER
        for layer in self.encoder:
            x = layer(x, mask_adder, training=training)
        pooled = tf.tanh(self.pooler(x[:, 0]))
        positions = features["masked_lm_positions"]
        masked = tf.gather(x, positions, batch_dims=1)  # [B, P, H]
        masked = self.transform_norm(gelu(self.transform(tf.reshape(masked, [-1, x.shape[-1]]))))  # [B * P, H]
        # The decoder is the word embeddings (tied), one 2-D matmul. Variables read inside call() come in the
        # compute dtype (Keras autocasts them): the biases are added there, as Dense adds its own. The bias
        # comes after the reshape: a MatMul + Add that grappler fuses into oneDNN's kernel segfaults instead
        # of raising ResourceExhaustedError when its output does not fit (TensorFlow 2.21, CPU).
        mlm_logits = tf.matmul(masked, self.embeddings.word_embeddings, transpose_b=True)
        mlm_logits = tf.reshape(mlm_logits, [tf.shape(positions)[0], tf.shape(positions)[1], -1])  # [B, P, V]
        mlm_logits += self.output_bias
        nsp_logits = tf.matmul(pooled, self.nsp_weights, transpose_b=True) + self.nsp_bias
        return tf.cast(mlm_logits, tf.float32), tf.cast(nsp_logits, tf.float32)


def pretraining_loss(features: dict, mlm_logits: tf.Tensor, nsp_logits: tf.Tensor) -> tf.Tensor:
    """Google's loss: masked-LM cross entropy weighted by masked_lm_weights + mean next-sentence cross entropy."""
    per_position = tf.nn.sparse_softmax_cross_entropy_with_logits(  # -log_softmax[label], [B, P]
        labels=tf.cast(features["masked_lm_ids"], tf.int32), logits=tf.cast(mlm_logits, tf.float32)
    )
    weights = tf.cast(features["masked_lm_weights"], tf.float32)
    mlm = tf.reduce_sum(weights * per_position) / (tf.reduce_sum(weights) + MLM_DENOMINATOR_EPSILON)
    nsp = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(features["next_sentence_labels"], tf.int32), logits=tf.cast(nsp_logits, tf.float32)
        )
    )
    return mlm + nsp


# ------------------------------------------------------------------------- canonical weights
def canonical_variables(model: BertPretraining) -> dict[str, keras.Variable]:
    """Google checkpoint name -> the model's variable (same names and order as bert.canonical_shapes)."""

    def dense(prefix: str, layer: keras.layers.Dense) -> dict:
        return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}

    def norm(prefix: str, layer: keras.layers.LayerNormalization) -> dict:
        return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}

    e = model.embeddings
    out = {
        "bert/embeddings/word_embeddings": e.word_embeddings,
        "bert/embeddings/token_type_embeddings": e.token_type_embeddings,
        "bert/embeddings/position_embeddings": e.position_embeddings,
        **norm("bert/embeddings/LayerNorm", e.layer_norm),
    }
    for index, layer in enumerate(model.encoder):
        p = f"bert/encoder/layer_{index}"
        out |= dense(f"{p}/attention/self/query", layer.query) | dense(f"{p}/attention/self/key", layer.key)
        out |= dense(f"{p}/attention/self/value", layer.value)
        out |= dense(f"{p}/attention/output/dense", layer.attention_output)
        out |= norm(f"{p}/attention/output/LayerNorm", layer.attention_norm)
        out |= dense(f"{p}/intermediate/dense", layer.intermediate) | dense(f"{p}/output/dense", layer.output_dense)
        out |= norm(f"{p}/output/LayerNorm", layer.output_norm)
    out |= dense("bert/pooler/dense", model.pooler) | dense("cls/predictions/transform/dense", model.transform)
    out |= norm("cls/predictions/transform/LayerNorm", model.transform_norm)
    out |= {
        "cls/predictions/output_bias": model.output_bias,
        "cls/seq_relationship/output_weights": model.nsp_weights,
        "cls/seq_relationship/output_bias": model.nsp_bias,
    }
    return out


def parameter_count(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def load_canonical(model: BertPretraining, weights: dict[str, np.ndarray]) -> None:
    """Assign canonical weights (names and shapes of bert.canonical_shapes); a missing, extra or misshapen
    tensor is an error, not a silent partial load."""
    variables = canonical_variables(model)
    check_names(variables, weights, "BERT")
    for name, variable in variables.items():
        value = np.asarray(weights[name])
        check_shape(name, value.shape, variable.shape)
        variable.assign(value.astype(variable.dtype))


def pretraining_outputs(
    cfg: BertConfig, weights: dict[str, np.ndarray], batch: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(masked-LM logits, next-sentence logits, loss) in float32 with dropout off: for bert_logits."""
    keras.mixed_precision.set_global_policy("float32")
    model = BertPretraining(cfg)
    load_canonical(model, weights)
    features = {k: tf.constant(v) for k, v in batch.items()}
    mlm, nsp = model(features, training=False)
    return mlm.numpy(), nsp.numpy(), float(pretraining_loss(features, mlm, nsp))


# ------------------------------------------------------------------------- optimizer
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """bert.learning_rate in the graph: linear warm-up over warmup_steps, then linear decay to 0 at
    train_steps, at the optimizer's 0-based step (its `iterations` before the update)."""

    def __init__(self, learning_rate: float, warmup_steps: int, train_steps: int) -> None:
        self.learning_rate, self.warmup_steps, self.train_steps = learning_rate, warmup_steps, train_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = self.learning_rate * (step + 1.0) / self.warmup_steps
        # (train_steps - step) / train_steps rather than 1 - step / train_steps: exact in float32 near the end
        decay = self.learning_rate * tf.maximum(0.0, self.train_steps - step) / self.train_steps
        return tf.where(step < self.warmup_steps, warmup, decay)

    def get_config(self) -> dict:
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps, "train_steps": self.train_steps}


OPTIMIZER_NAMES = {
    "adam": "AdamW (keras.optimizers.AdamW: decoupled weight decay, bias-corrected)",
    "lamb": "LAMB (keras.optimizers.Lamb: decoupled weight decay, per-tensor trust ratio)",
}


def make_optimizer(name: str, model: BertPretraining, learning_rate: float | None = None) -> keras.optimizers.Optimizer:
    """bert.OPTIMIZERS[name] as a Keras optimizer over the model's variables, LayerNorm and biases excluded
    from weight decay. learning_rate None: the warm-up/decay schedule; a number: that constant rate."""
    settings = bert.OPTIMIZERS[name]
    rate = (
        learning_rate
        if learning_rate is not None
        else WarmupLinearDecay(settings.learning_rate, settings.warmup_steps, settings.train_steps)
    )
    kind = {"adam": keras.optimizers.AdamW, "lamb": keras.optimizers.Lamb}[name]
    optimizer = kind(
        learning_rate=rate,
        weight_decay=settings.weight_decay,
        beta_1=settings.beta1,
        beta_2=settings.beta2,
        epsilon=settings.epsilon,
    )
    excluded = [v for n, v in canonical_variables(model).items() if bert.excluded_from_weight_decay(n)]
    optimizer.exclude_from_weight_decay(var_list=excluded)
    return optimizer


# ------------------------------------------------------------------------- the training step
def make_train_step(
    model: BertPretraining,
    optimizer: keras.optimizers.Optimizer,
    *,
    clip_norm: float | None,
    world: int = 1,
    strategy: tf.distribute.Strategy | None = None,
    jit_compile: bool = False,
):
    """The step `features -> loss` (a tf.function): forward in training mode (dropout on), loss,
    gradients, clipping by global norm when clip_norm is given, update.

    One worker: the whole step is one function (XLA-compiled with jit_compile). Several workers
    (MultiWorkerMirroredStrategy): each replica's loss is scaled by 1/world and the step sums the
    gradients itself (one all-reduce, = their mean, as DDP), so clipping sees the global gradient and
    the loss-scale check agrees on every worker; the optimizer is told not to sum them again. Only
    forward + backward are compiled then (XLA on CPU has no cross-worker collectives).
    """
    scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    variables = model.trainable_variables

    def gradients(features):
        with tf.GradientTape() as tape:
            mlm, nsp = model(features, training=True)
            loss = pretraining_loss(features, mlm, nsp)
            objective = loss / world if world > 1 else loss
            if scaling:
                objective = optimizer.scale_loss(objective)
        return loss, tape.gradient(objective, variables)

    def clip(grads):
        if clip_norm is None:
            return grads
        # Scaled gradients (float16 loss scaling) are clipped at the bound times the scale, which is the same;
        # a non-finite norm makes them NaN and the loss-scale optimizer skips the step.
        bound = clip_norm * tf.cast(optimizer.dynamic_scale, tf.float32) if scaling else clip_norm
        return tf.clip_by_global_norm(grads, bound)[0]

    if world == 1:

        def train_step(features):
            loss, grads = gradients(features)
            optimizer.apply(clip(grads), variables)
            return loss

        return tf.function(train_step, jit_compile=jit_compile)

    inner = optimizer.inner_optimizer if scaling else optimizer
    inner._all_reduce_sum_gradients = list  # the step below already summed them across workers
    compute = tf.function(gradients, jit_compile=True) if jit_compile else gradients

    def replica_step(features):
        loss, grads = compute(features)
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        optimizer.apply(clip(grads), variables)
        return loss

    @tf.function
    def distributed_step(features):
        return strategy.run(replica_step, args=(features,))

    return distributed_step
