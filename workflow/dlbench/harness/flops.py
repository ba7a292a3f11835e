"""Model FLOPs per sample, from the architecture (standard library only).

Counted: convolutions and fully-connected layers, the work that dominates (BatchNorm, ReLU, pooling and
the residual adds are < 1% and left out, as in the usual figures). One multiply-accumulate (MAC) is
2 FLOPs. ResNet-50 at 224x224 does 4.09 GMACs forward, the figure usually quoted as "4.1 GFLOPs";
a training step (forward + backward for activations and weights) is taken as 3x forward.
"""

from __future__ import annotations

# Same table as the models: (bottleneck width, blocks, stride of the first block) per stage.
RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
TRAIN_TO_FORWARD = 3


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def resnet50_forward_macs(image_size: int, num_classes: int = 1000) -> int:
    """Multiply-accumulates of one ResNet-50 v1.5 forward pass on one image_size x image_size image."""
    macs, size = 0, image_size

    def conv(c_in: int, c_out: int, kernel: int, stride: int, padding: int) -> None:
        nonlocal macs, size
        size = _conv_out(size, kernel, stride, padding)
        macs += c_in * c_out * kernel * kernel * size * size

    conv(3, 64, 7, 2, 3)
    size = _conv_out(size, 3, 2, 1)  # max pool
    channels = 64
    for width, blocks, first_stride in RESNET50_STAGES:
        for block in range(blocks):
            stride, start = (first_stride if block == 0 else 1), size
            if stride != 1 or channels != width * 4:  # projection shortcut, on the block's input
                macs += channels * width * 4 * _conv_out(start, 1, stride, 0) ** 2
            conv(channels, width, 1, 1, 0)
            conv(width, width, 3, stride, 1)  # v1.5: the stride is here
            conv(width, width * 4, 1, 1, 0)
            channels = width * 4
    return macs + channels * num_classes


def model_flops(model: str, image_size: int | None = None) -> dict[str, float]:
    """Forward MACs and training FLOPs per sample of a model at its input shape."""
    if model != "resnet50":
        raise ValueError(f"no FLOP count for model {model!r}")
    macs = resnet50_forward_macs(image_size or 224)
    return {"forward_macs_per_sample": macs, "train_flops_per_sample": TRAIN_TO_FORWARD * 2 * macs}
