"""ResNet-50 v1.5 in PaddlePaddle (paddle.nn, NCHW), built from harness/resnet.py's table as every backend's.

v1.5 puts the stride of a downsampling bottleneck on its 3x3 convolution (v1: on the first 1x1); 25,557,032
trainable parameters with 1000 classes. The reference initialisation: Kaiming-normal (fan_out) convolutions, the
last BatchNorm of each residual branch starting at zero, the classifier as torch.nn.Linear's (uniform
+-1/sqrt(fan_in), weight and bias). BatchNorm momentum 0.9 in Paddle's convention (running = 0.9 running + 0.1
batch) is PyTorch's 0.1, eps 1e-5 as PyTorch's.

The layers carry PyTorch's names (conv1, bn1, layers.<i>.conv1, ..., downsample.0/1, fc), so `load_torch_state`
takes a PyTorch state_dict (the equivalence tests): Paddle's BatchNorm statistics are `_mean` and `_variance`
(PyTorch's running_mean and running_var), and a Linear weight is [in, out] (PyTorch's transposed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import paddle
from paddle import nn

from ... import resnet as shared  # stages and stem per model
from ... import weights

CONV_INIT = nn.initializer.KaimingNormal(nonlinearity="relu", mode="fan_out")  # kaiming_normal_(mode="fan_out")


def conv(in_channels: int, out_channels: int, kernel: int, stride: int = 1, padding: int = 0) -> nn.Conv2D:
    return nn.Conv2D(
        in_channels,
        out_channels,
        kernel,
        stride=stride,
        padding=padding,
        weight_attr=paddle.ParamAttr(initializer=CONV_INIT),
        bias_attr=False,
    )


def batch_norm(channels: int, zero: bool = False) -> nn.BatchNorm2D:
    """zero: the last BatchNorm of a residual branch (its scale starts at 0)."""
    scale = paddle.ParamAttr(initializer=nn.initializer.Constant(0.0 if zero else 1.0))
    return nn.BatchNorm2D(channels, momentum=0.9, epsilon=1e-5, weight_attr=scale)


class Bottleneck(nn.Layer):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = conv(in_channels, width, 1)
        self.bn1 = batch_norm(width)
        self.conv2 = conv(width, width, 3, stride=stride, padding=1)  # v1.5
        self.bn2 = batch_norm(width)
        self.conv3 = conv(width, out_channels, 1)
        self.bn3 = batch_norm(out_channels, zero=True)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(conv(in_channels, out_channels, 1, stride=stride), batch_norm(out_channels))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet50(nn.Layer):
    """ResNet-50 v1.5, or with `model` another network of harness/resnet.py's table (resnet_tiny)."""

    def __init__(self, num_classes: int = 1000, model: str = "resnet50") -> None:
        super().__init__()
        stem = shared.STEM[model]
        self.conv1 = conv(3, stem, 7, stride=2, padding=3)
        self.bn1 = batch_norm(stem)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2D(3, stride=2, padding=1)
        blocks, channels = [], stem
        for width, count, stride in shared.STAGES[model]:
            for i in range(count):
                blocks.append(Bottleneck(channels, width, stride if i == 0 else 1))
                channels = width * Bottleneck.expansion
        self.layers = nn.Sequential(*blocks)
        bound = 1.0 / math.sqrt(channels)  # torch.nn.Linear's default
        uniform = nn.initializer.Uniform(-bound, bound)
        init = paddle.ParamAttr(initializer=uniform)
        self.fc = nn.Linear(channels, num_classes, weight_attr=init, bias_attr=paddle.ParamAttr(initializer=uniform))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(paddle.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def parameter_count(model: nn.Layer) -> int:
    """Trainable parameters, a tied weight once (parameters() also holds BatchNorm's statistics: not counted)."""
    return sum(int(np.prod(p.shape)) for p in model.parameters() if not p.stop_gradient)


TORCH_NAMES = {"_mean": "running_mean", "_variance": "running_var"}  # Paddle's BatchNorm statistics


def torch_name(name: str) -> str:
    """The PyTorch state_dict name of one of this model's state entries."""
    prefix, _, leaf = name.rpartition(".")
    return f"{prefix}.{TORCH_NAMES.get(leaf, leaf)}"


def load_torch_state(model: ResNet50, state: Mapping[str, np.ndarray]) -> None:
    """Copy a PyTorch ResNet's state_dict (numpy arrays) into the model: every entry, each of its shape (Linear
    weights transposed), or nothing (weights.check_names, check_shape). PyTorch's num_batches_tracked has no
    counterpart and is ignored."""
    ours = {torch_name(name): (name, tensor) for name, tensor in model.state_dict().items()}
    given = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    weights.check_names(ours, given, "the Paddle ResNet")
    values = {}
    for key, (name, tensor) in ours.items():
        value = np.asarray(given[key])
        if name == "fc.weight":
            value = value.T  # PyTorch [out, in] -> Paddle [in, out]
        weights.check_shape(key, value.shape, tensor.shape)
        values[name] = value.astype(tensor.numpy().dtype)
    model.set_state_dict(values)
