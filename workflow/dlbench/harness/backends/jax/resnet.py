"""ResNet-50 v1.5 in Flax (linen), NHWC (JAX's native layout), from harness/resnet.py's table.

The same network as the PyTorch backend's (backends/pytorch/resnet.py): v1.5 puts the stride of a downsampling
bottleneck on its 3x3 convolution; explicit symmetric padding as PyTorch's (Flax's 'SAME' pads a stride-2
convolution asymmetrically); Kaiming-normal (fan_out) convolutions, the last BatchNorm of each residual branch
starting at zero; the classifier initialised as torch.nn.Linear (uniform +-1/sqrt(fan_in)). BatchNorm: momentum
0.9 of the running average (PyTorch's 0.1 of the new value), epsilon 1e-5; statistics in float32 also under
bf16. 25,557,032 trainable parameters with 1000 classes.

`load_torch_state` takes a PyTorch state_dict (its names and layouts) for the equivalence tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from ... import resnet as shared  # stages and stem per model
from ... import weights

EXPANSION = 4
BN_MOMENTUM, BN_EPSILON = 0.9, 1e-5
conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")  # kaiming_normal_(mode="fan_out")


def torch_linear_init(fan_in: int):
    """torch.nn.Linear's default: uniform in +-1/sqrt(fan_in), for weight and bias."""
    bound = 1.0 / math.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class Bottleneck(nn.Module):
    width: int
    stride: int
    downsample: bool
    dtype: jnp.dtype = jnp.float32  # compute dtype (bfloat16 under amp); parameters stay float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        conv = lambda features, size, stride, name: nn.Conv(  # noqa: E731
            features,
            (size, size),
            (stride, stride),
            padding=[(size // 2, size // 2)] * 2,
            use_bias=False,
            kernel_init=conv_init,
            dtype=self.dtype,
            name=name,
        )
        norm = lambda name, zero=False: nn.BatchNorm(  # noqa: E731
            use_running_average=not train,
            momentum=BN_MOMENTUM,
            epsilon=BN_EPSILON,
            use_fast_variance=False,
            dtype=self.dtype,
            scale_init=nn.initializers.zeros if zero else nn.initializers.ones,
            name=name,
        )
        identity = x
        if self.downsample:
            identity = norm("downsample_bn")(conv(self.width * EXPANSION, 1, self.stride, "downsample_conv")(x))
        out = nn.relu(norm("bn1")(conv(self.width, 1, 1, "conv1")(x)))
        out = nn.relu(norm("bn2")(conv(self.width, 3, self.stride, "conv2")(out)))  # v1.5: stride on the 3x3
        out = norm("bn3", zero=True)(conv(self.width * EXPANSION, 1, 1, "conv3")(out))
        return nn.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50 v1.5, or with `model` another network of harness/resnet.py's table (resnet_tiny).
    Input NHWC images; output float32 logits."""

    model: str = "resnet50"
    num_classes: int = 1000
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        stem = shared.STEM[self.model]
        x = x.astype(self.dtype)
        x = nn.Conv(
            stem,
            (7, 7),
            (2, 2),
            padding=[(3, 3), (3, 3)],
            use_bias=False,
            kernel_init=conv_init,
            dtype=self.dtype,
            name="conv1",
        )(x)
        x = nn.BatchNorm(
            use_running_average=not train,
            momentum=BN_MOMENTUM,
            epsilon=BN_EPSILON,
            use_fast_variance=False,
            dtype=self.dtype,
            name="bn1",
        )(x)
        x = nn.max_pool(nn.relu(x), (3, 3), strides=(2, 2), padding=[(1, 1), (1, 1)])
        channels, index = stem, 0
        for width, count, stride in shared.STAGES[self.model]:
            for i in range(count):
                first_stride = stride if i == 0 else 1
                downsample = first_stride != 1 or channels != width * EXPANSION
                x = Bottleneck(width, first_stride, downsample, self.dtype, name=f"layers_{index}")(x, train)
                channels, index = width * EXPANSION, index + 1
        x = jnp.mean(x, axis=(1, 2))
        init = torch_linear_init(channels)
        x = nn.Dense(self.num_classes, kernel_init=init, bias_init=init, dtype=self.dtype, name="fc")(x)
        return x.astype(jnp.float32)


def init(model: ResNet50, key: jax.Array, image_size: int) -> tuple[dict, dict]:
    """(params, batch_stats) of the model, float32."""
    variables = jax.jit(lambda k: model.init(k, jnp.zeros((1, image_size, image_size, 3)), train=False))(key)
    return variables["params"], variables["batch_stats"]


def parameter_count(params: dict) -> int:
    return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))


# ------------------------------------------------------------------------- PyTorch's names (equivalence tests)
def torch_names(params: dict, batch_stats: dict) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """PyTorch state_dict name -> (collection, Flax path, layout): layout 'conv' (OIHW <-> HWIO), 'dense'
    ([out, in] <-> [in, out]) or 'same'."""
    out: dict[str, tuple[str, tuple[str, ...], str]] = {}
    flat = {**traverse_util.flatten_dict({"params": params}), **traverse_util.flatten_dict({"stats": batch_stats})}
    for path in flat:
        collection, *modules, leaf = path
        parts = []
        for module in modules:
            if module.startswith("layers_"):
                parts.append(f"layers.{module.split('_')[1]}")
            elif module == "downsample_conv":
                parts.append("downsample.0")
            elif module == "downsample_bn":
                parts.append("downsample.1")
            else:
                parts.append(module)
        torch_leaf, layout = {
            ("params", "kernel"): ("weight", "conv" if flat[path].ndim == 4 else "dense"),
            ("params", "scale"): ("weight", "same"),
            ("params", "bias"): ("bias", "same"),
            ("stats", "mean"): ("running_mean", "same"),
            ("stats", "var"): ("running_var", "same"),
        }[(collection, leaf)]
        out[".".join([*parts, torch_leaf])] = (collection, tuple(modules) + (leaf,), layout)
    return out


def to_flax_layout(value: np.ndarray, layout: str) -> np.ndarray:
    if layout == "conv":
        return np.transpose(value, (2, 3, 1, 0))  # OIHW -> HWIO
    return value.T if layout == "dense" else value


def load_torch_state(params: dict, batch_stats: dict, state: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
    """(params, batch_stats) holding a PyTorch state_dict's values: every tensor is needed, none may be extra
    (num_batches_tracked, a counter PyTorch keeps, is ignored)."""
    names = torch_names(params, batch_stats)
    given = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    weights.check_names(names, given, "the Flax ResNet")
    flat = {"params": traverse_util.flatten_dict(params), "stats": traverse_util.flatten_dict(batch_stats)}
    for name, (collection, path, layout) in names.items():
        value = to_flax_layout(np.asarray(given[name], np.float32), layout)
        weights.check_shape(name, value.shape, flat[collection][path].shape)
        flat[collection][path] = jnp.asarray(value)
    return traverse_util.unflatten_dict(flat["params"]), traverse_util.unflatten_dict(flat["stats"])


def torch_gradients(grads: dict, batch_stats: dict) -> dict[str, np.ndarray]:
    """Gradients of the parameters under PyTorch's names and layouts (the inverse of to_flax_layout)."""
    out = {}
    for name, (collection, path, layout) in torch_names(grads, batch_stats).items():
        if collection != "params":
            continue
        value = np.asarray(traverse_util.flatten_dict(grads)[path])
        out[name] = np.transpose(value, (3, 2, 0, 1)) if layout == "conv" else value.T if layout == "dense" else value
    return out
