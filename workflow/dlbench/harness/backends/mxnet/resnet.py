"""ResNet-50 v1.5 as a Gluon HybridBlock (MXNet 1.9), written here to mirror pytorch/resnet.py's `ResNet50`.

Same layers in the same order, with the same child names as the PyTorch model, so a PyTorch
`state_dict()` maps onto it name for name (`load_torch_state`): v1.5 puts the stride of a
downsampling bottleneck on its 3x3 convolution, the last BatchNorm of each residual branch starts at
zero, 25,557,032 trainable parameters with 1000 classes. BatchNorm as PyTorch's: epsilon 1e-5 and
running statistics updated with momentum 0.9 in MXNet's convention (0.1 in PyTorch's). Two MXNet
differences that change no forward result and no timing: the running statistics are updated in the
backward pass (a forward alone leaves them), and the running variance takes the batch's biased
variance (PyTorch's the unbiased one).
"""

from __future__ import annotations

import numpy as np
from mxnet import gluon, init
from mxnet.gluon import nn

from ...weights import check_names, check_shape

# (bottleneck width, blocks, stride of the first block) per stage, as in pytorch/resnet.py
RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9  # MXNet: running = momentum * running + (1 - momentum) * batch; PyTorch's 0.1

# PyTorch parameter/buffer name -> Gluon parameter name, per layer type
_TORCH_TO_GLUON = {
    nn.Conv2D: {"weight": "weight"},
    nn.Dense: {"weight": "weight", "bias": "bias"},
    nn.BatchNorm: {"weight": "gamma", "bias": "beta", "running_mean": "running_mean", "running_var": "running_var"},
}


def conv(channels: int, kernel: int, in_channels: int, stride: int = 1, padding: int = 0) -> nn.Conv2D:
    # He-normal, fan_out (as kaiming_normal_(mode="fan_out", nonlinearity="relu")): scale 2, out = O*k*k
    return nn.Conv2D(
        channels,
        kernel,
        strides=stride,
        padding=padding,
        use_bias=False,
        in_channels=in_channels,
        weight_initializer=init.MSRAPrelu(factor_type="out", slope=0.0),
    )


def batch_norm(channels: int, zero: bool = False) -> nn.BatchNorm:
    return nn.BatchNorm(
        momentum=BN_MOMENTUM, epsilon=BN_EPSILON, in_channels=channels, gamma_initializer="zeros" if zero else "ones"
    )


class Bottleneck(gluon.HybridBlock):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int, **kwargs) -> None:
        super().__init__(**kwargs)
        out_channels = width * self.expansion
        with self.name_scope():
            self.conv1 = conv(width, 1, in_channels)
            self.bn1 = batch_norm(width)
            self.conv2 = conv(width, 3, width, stride=stride, padding=1)  # v1.5
            self.bn2 = batch_norm(width)
            self.conv3 = conv(out_channels, 1, width)
            self.bn3 = batch_norm(out_channels, zero=True)
            self.downsample = None
            if stride != 1 or in_channels != out_channels:
                self.downsample = nn.HybridSequential()
                self.downsample.add(conv(out_channels, 1, in_channels, stride=stride), batch_norm(out_channels))

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's signature
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + identity)


class ResNet50(gluon.HybridBlock):
    def __init__(self, num_classes: int = 1000, **kwargs) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv1 = conv(64, 7, 3, stride=2, padding=3)
            self.bn1 = batch_norm(64)
            self.maxpool = nn.MaxPool2D(pool_size=3, strides=2, padding=1)
            self.layers = nn.HybridSequential()
            channels = 64
            for width, count, stride in RESNET50_STAGES:
                for i in range(count):
                    self.layers.add(Bottleneck(channels, width, stride if i == 0 else 1))
                    channels = width * Bottleneck.expansion
            # PyTorch's nn.Linear default init (uniform +-1/sqrt(fan_in)) for weight and bias
            bound = 1.0 / np.sqrt(channels)
            self.fc = nn.Dense(
                num_classes,
                in_units=channels,
                weight_initializer=init.Uniform(bound),
                bias_initializer=init.Uniform(bound),
            )

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's signature
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        x = F.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg")
        return self.fc(F.flatten(x))


def torch_named_parameters(block: gluon.Block, prefix: str = "") -> dict:
    """Gluon Parameters of `block` under the names PyTorch's `state_dict()` gives the same model."""
    out = {}
    mapping = _TORCH_TO_GLUON.get(type(block), {})
    for torch_name, gluon_name in mapping.items():
        out[prefix + torch_name] = block._reg_params[gluon_name]
    for name, child in block._children.items():
        if child is not None:
            out.update(torch_named_parameters(child, f"{prefix}{name}."))
    return out


def load_torch_state(net: gluon.Block, arrays: dict[str, np.ndarray]) -> None:
    """Load weights given with pytorch/resnet.py's `ResNet50().state_dict()` names and layouts.

    Conv weights are OIHW and Linear weights [out, in] in both frameworks; BatchNorm weight/bias are
    gamma/beta. `num_batches_tracked` has no Gluon counterpart and is ignored. Every parameter of the
    net must be given, with its exact shape; names the net does not have are an error.
    """
    params = torch_named_parameters(net)
    given = {k: v for k, v in arrays.items() if not k.endswith("num_batches_tracked")}
    check_names(params, given, "ResNet-50")
    for name, param in params.items():
        value = np.asarray(given[name])
        check_shape(name, value.shape, param.shape)
        param.set_data(value.astype(param.dtype, copy=False))


def parameter_count(net: gluon.Block) -> int:
    """Trainable parameters (grad_req != 'null'): BatchNorm running statistics are not counted."""
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")
