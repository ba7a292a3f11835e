"""ResNet-50 v1.5 in PyTorch, written here (torchvision does not import with the CPU torch).

v1.5 puts the stride of a downsampling bottleneck on its 3x3 convolution (v1: on the first 1x1).
25,557,032 trainable parameters with 1000 classes. The last BatchNorm of each residual branch starts
at zero (as in NVIDIA's and MLPerf's reference), which changes no shape or count.
"""

from __future__ import annotations

import torch
from torch import nn

from ... import resnet as shared  # stages and stem per model


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        nn.init.zeros_(self.bn3.weight)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity  # in place, as torchvision: BatchNorm's backward needs its input, not this output
        return self.relu(out)


class ResNet50(nn.Module):
    """ResNet-50 v1.5, or with `model` another network of harness/resnet.py's table (resnet_tiny)."""

    def __init__(self, num_classes: int = 1000, model: str = "resnet50") -> None:
        super().__init__()
        stem = shared.STEM[model]
        self.conv1 = nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks, channels = [], stem
        for width, count, stride in shared.STAGES[model]:
            for i in range(count):
                blocks.append(Bottleneck(channels, width, stride if i == 0 else 1))
                channels = width * Bottleneck.expansion
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
