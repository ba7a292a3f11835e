"""ResNet-50 v1.5 in Keras (TensorFlow 2), written here: the twin of pytorch/resnet.py's `ResNet50`.

`keras.applications.ResNet50` is v1 (stride on the first 1x1 of a downsampling bottleneck) and pads
differently, so it is not used. This model has the same layers, in the same order and with the same
names as the PyTorch one (a Keras layer is named after its PyTorch module path, e.g.
`layers.3.downsample.0`), 25,557,032 trainable parameters with 1000 classes, so
`load_torch_state` can load a PyTorch `state_dict()` and both give the same outputs.

Differences that matter for exactness, and how they are handled:
- PyTorch pads symmetrically (conv padding=1/3, max-pool padding=1); TensorFlow's 'same' padding is
  asymmetric for stride 2 (all the padding at the bottom/right). Strided convolutions and the
  max-pool therefore get an explicit ZeroPadding2D and 'valid' padding. Stride-1 3x3 convolutions
  keep 'same', which is symmetric there (1 each side) and identical.
- The max-pool follows a ReLU, so every input is >= 0 and every 3x3 window holds at least one real
  input: padding with zeros gives the same maximum as PyTorch's implicit -inf padding.
- BatchNorm: epsilon 1e-5 and Keras momentum 0.9 (= PyTorch momentum 0.1; Keras weights the old
  value, PyTorch the new one). Keras updates the moving variance with the biased batch variance,
  PyTorch with the unbiased one (a factor n/(n-1) on the update only; outputs are the same).
- Initialisation follows PyTorch: Kaiming-normal (fan_out, ReLU) convolutions, BN gamma 1 / beta 0
  except the last BN of each residual branch (gamma 0), PyTorch's default uniform Linear init.

`make_train_step` is the custom tf.function step the TensorFlow backend times; `FusedSGD` its update.

Runs inside the TensorFlow environment: imports only the standard library, numpy and TensorFlow.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras is Keras 3: make sure it runs on TensorFlow

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from ... import resnet as shared  # noqa: E402 - stages and stem per model
from ...weights import check_names, check_shape  # noqa: E402

if TYPE_CHECKING:  # the annotations name keras classes: mypy needs the module there, not the variable tf.keras
    from tensorflow import keras
else:
    keras = tf.keras

BN_EPSILON = 1e-5
BN_MOMENTUM = 1.0 - 0.1  # Keras convention for PyTorch's momentum=0.1


def _conv(filters: int, kernel: int, stride: int, name: str) -> keras.layers.Conv2D:
    """A bias-free convolution; 'valid' unless stride 1 with a 3x3 kernel (symmetric 'same')."""
    padding = "same" if kernel > 1 and stride == 1 else "valid"
    return keras.layers.Conv2D(
        filters,
        kernel,
        strides=stride,
        padding=padding,
        use_bias=False,
        name=name,
        # kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (k * k * out))
        kernel_initializer=keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal"),
    )


def _bn(name: str, zero_gamma: bool = False) -> keras.layers.BatchNormalization:
    return keras.layers.BatchNormalization(
        axis=-1,
        momentum=BN_MOMENTUM,
        epsilon=BN_EPSILON,
        name=name,
        gamma_initializer="zeros" if zero_gamma else "ones",
    )


class Bottleneck(keras.layers.Layer):
    """1x1 -> 3x3 (stride here: v1.5) -> 1x1, plus the (projected) shortcut."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int, prefix: str, **kwargs) -> None:
        super().__init__(name=prefix, **kwargs)
        out_channels = width * self.expansion
        self.conv1 = _conv(width, 1, 1, f"{prefix}.conv1")
        self.bn1 = _bn(f"{prefix}.bn1")
        # PyTorch padding=1 on both sides; only stride 2 needs it explicit (see module docstring)
        self.pad2 = keras.layers.ZeroPadding2D(1, name=f"{prefix}.pad2") if stride != 1 else None
        self.conv2 = _conv(width, 3, stride, f"{prefix}.conv2")
        self.bn2 = _bn(f"{prefix}.bn2")
        self.conv3 = _conv(out_channels, 1, 1, f"{prefix}.conv3")
        self.bn3 = _bn(f"{prefix}.bn3", zero_gamma=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = [_conv(out_channels, 1, stride, f"{prefix}.downsample.0"), _bn(f"{prefix}.downsample.1")]

    def call(self, x, training=None):
        identity = x
        if self.downsample is not None:
            identity = self.downsample[1](self.downsample[0](x), training=training)
        out = tf.nn.relu(self.bn1(self.conv1(x), training=training))
        if self.pad2 is not None:
            out = self.pad2(out)
        out = tf.nn.relu(self.bn2(self.conv2(out), training=training))
        out = self.bn3(self.conv3(out), training=training)
        return tf.nn.relu(out + identity)


class ResNet50(keras.Model):
    """NHWC input (batch, height, width, 3) -> logits (batch, num_classes)."""

    def __init__(self, num_classes: int = 1000, model: str = "resnet50", **kwargs) -> None:
        super().__init__(name=model, **kwargs)
        self.pad1 = keras.layers.ZeroPadding2D(3, name="pad1")
        self.conv1 = _conv(shared.STEM[model], 7, 2, "conv1")
        self.bn1 = _bn("bn1")
        self.pool_pad = keras.layers.ZeroPadding2D(1, name="maxpool_pad")  # exact after ReLU: inputs >= 0
        self.maxpool = keras.layers.MaxPooling2D(3, strides=2, padding="valid", name="maxpool")
        blocks: list[Bottleneck] = []
        channels = shared.STEM[model]
        for width, count, stride in shared.STAGES[model]:
            for i in range(count):
                blocks.append(Bottleneck(channels, width, stride if i == 0 else 1, f"layers.{len(blocks)}"))
                channels = width * Bottleneck.expansion
        self.blocks = blocks
        self.avgpool = keras.layers.GlobalAveragePooling2D(name="avgpool")
        bound = 1.0 / math.sqrt(channels)  # nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in))
        self.fc = keras.layers.Dense(
            num_classes,
            name="fc",
            kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
            bias_initializer=keras.initializers.RandomUniform(-bound, bound),
        )

    def call(self, x, training=None):
        x = tf.nn.relu(self.bn1(self.conv1(self.pad1(x)), training=training))
        x = self.maxpool(self.pool_pad(x))
        for block in self.blocks:
            x = block(x, training=training)
        return self.fc(self.avgpool(x))


def build(model: ResNet50, image_size: int = 32) -> ResNet50:
    """Create the variables (the model is fully convolutional: any image size gives the same ones)."""
    model(tf.zeros((1, image_size, image_size, 3)), training=False)
    return model


def parameter_count(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def torch_layers(model: ResNet50) -> list[keras.layers.Layer]:
    """The layers with weights, in the order of the PyTorch model's modules (= state_dict order)."""
    layers = [model.conv1, model.bn1]
    for block in model.blocks:
        layers += [block.conv1, block.bn1, block.conv2, block.bn2, block.conv3, block.bn3]
        layers += block.downsample or []
    return [*layers, model.fc]


def torch_state_names(model: ResNet50) -> list[str]:
    """PyTorch `state_dict()` names of every weight, in the order the Keras model holds them."""
    suffixes = {
        keras.layers.Conv2D: ("weight",),
        keras.layers.BatchNormalization: ("weight", "bias", "running_mean", "running_var"),
        keras.layers.Dense: ("weight", "bias"),
    }
    return [f"{layer.name}.{s}" for layer in torch_layers(model) for s in suffixes[type(layer)]]


def load_torch_state(model: ResNet50, arrays: dict[str, np.ndarray]) -> None:
    """Load weights given with the names and layouts of pytorch/resnet.py's `ResNet50().state_dict()`.

    conv OIHW -> HWIO, linear [out, in] -> [in, out], BN weight/bias/running_mean/running_var ->
    gamma/beta/moving_mean/moving_variance; `num_batches_tracked` is ignored. Every other name must
    match exactly (a missing or extra name is an error, not a silent partial load).
    """
    if not model.built:
        build(model)
    arrays = {k: np.asarray(v) for k, v in arrays.items() if not k.endswith("num_batches_tracked")}
    expected = torch_state_names(model)
    check_names(expected, arrays, "ResNet-50")
    for layer in torch_layers(model):
        name = layer.name
        if isinstance(layer, keras.layers.Conv2D):
            values = [arrays[f"{name}.weight"].transpose(2, 3, 1, 0)]
        elif isinstance(layer, keras.layers.BatchNormalization):
            values = [arrays[f"{name}.{s}"] for s in ("weight", "bias", "running_mean", "running_var")]
        else:
            values = [arrays[f"{name}.weight"].T, arrays[f"{name}.bias"]]
        current = layer.get_weights()
        for have, new in zip(current, values, strict=True):
            check_shape(name, new.shape, have.shape)
        layer.set_weights([np.ascontiguousarray(v, dtype=h.dtype) for h, v in zip(current, values, strict=True)])


# ------------------------------------------------------------------------- the training step
class FusedSGD:
    """ResNet-50's optimizer: SGD with momentum and weight decay as torch.optim.SGD computes it, one fused
    kernel per variable.

    Per variable, TensorFlow's own `ResourceApplyMomentum` kernel (accum = momentum * accum + g;
    var -= lr * accum) on g = grad + weight_decay * var: PyTorch's and MXNet's coupled (L2) weight decay, so that
    the three frameworks train the same update. Why not `keras.optimizers.SGD`: Keras 3 builds its update from
    separate element-wise ops (decoupled decay, momentum, assignment: several passes over the 25.6M weights and
    their slots per step): 32 ms of a 244 ms ResNet-50 step on the 2-core VM (64x64, batch 8, oneDNN), where the
    fused update takes 11 ms, the step 9% faster; and its decay is decoupled
    (var -= lr * weight_decay * var), not PyTorch's.

    Interface as far as the backend uses a Keras optimizer: `apply(grads, variables)`, a `learning_rate` variable
    (time to quality's schedule assigns it), `momentum` and `weight_decay` (read when the step is traced)."""

    def __init__(self, variables: list, learning_rate: float, momentum: float, weight_decay: float) -> None:
        """The momentum slots of `variables` (create it under the strategy's scope: mirrored with the weights)."""
        self.learning_rate = tf.Variable(learning_rate, trainable=False, dtype=tf.float32, name="learning_rate")
        self.momentum, self.weight_decay = momentum, weight_decay
        self.slots = [
            tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"momentum_{i}")
            for i, v in enumerate(variables)
        ]

    def apply(self, grads: list[tf.Tensor], variables: list) -> None:
        """One update of every variable, inside the step's tf.function. On several workers (a replica context
        of MultiWorkerMirroredStrategy) the gradients are summed across them first, as a Keras optimizer's
        `apply` does: every worker then applies the same update to its copy."""
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:  # as Keras optimizers do: sum, then update
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        momentum = tf.constant(self.momentum, tf.float32)
        for grad, var, slot in zip(grads, variables, self.slots, strict=True):
            if self.weight_decay:
                grad = grad + self.weight_decay * var
            tf.raw_ops.ResourceApplyMomentum(
                var=var.handle,
                accum=slot.handle,
                lr=self.learning_rate,
                grad=grad,
                momentum=momentum,
                use_locking=False,
                use_nesterov=False,
            )


def make_train_step(
    model: ResNet50,
    optimizer: FusedSGD | keras.optimizers.Optimizer,
    *,
    world: int = 1,
    strategy: tf.distribute.Strategy | None = None,
    jit_compile: bool = False,
):
    """The step `(images, labels) -> loss` (a tf.function): forward in training mode, softmax cross-entropy
    (the batch mean), gradients, update.

    One worker: the whole step is one function (XLA-compiled with jit_compile). Several workers
    (MultiWorkerMirroredStrategy): each replica's loss is scaled by 1/world and the optimizer sums the
    workers' gradients (= their mean, as DDP); only forward + backward are compiled then (XLA on CPU has no
    cross-worker collectives).
    """
    scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def gradients(images, labels):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            # the optimizer sums the workers' gradients: 1/world makes it their mean (as DDP)
            objective = loss / world if world > 1 else loss
            if scaling:
                objective = optimizer.scale_loss(objective)
        return loss, tape.gradient(objective, model.trainable_variables)

    if world == 1:

        def train_step(images, labels):
            loss, grads = gradients(images, labels)
            optimizer.apply(grads, model.trainable_variables)
            return loss

        return tf.function(train_step, jit_compile=jit_compile)

    compute = tf.function(gradients, jit_compile=True) if jit_compile else gradients

    def replica_step(images, labels):
        loss, grads = compute(images, labels)
        optimizer.apply(grads, model.trainable_variables)  # all-reduces the gradients, then updates
        return loss

    @tf.function
    def distributed_step(images, labels):
        return strategy.run(replica_step, args=(images, labels))

    return distributed_step
