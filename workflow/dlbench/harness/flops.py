"""Model FLOPs per sample (an image, a sequence, or for Llama a token: the sample its unit tokens/s counts), from
the architecture (the dimensions of harness/resnet.py, harness/bert.py and harness/llama.py).

Counted: convolutions and fully-connected layers, the work that dominates (BatchNorm, ReLU, pooling and
the residual adds are < 1% and left out, as in the usual figures). One multiply-accumulate (MAC) is
2 FLOPs. ResNet-50 at 224x224 does 4.09 GMACs forward, the figure usually quoted as "4.1 GFLOPs";
a training step (forward + backward for activations and weights) is taken as 3x forward.
"""

from __future__ import annotations

from ..vocabulary.axes import DEFAULTS as AXIS_DEFAULTS
from . import bert, llama, resnet

TRAIN_TO_FORWARD = 3


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def resnet50_forward_macs(image_size: int, num_classes: int = 1000, model: str = "resnet50") -> int:
    """Multiply-accumulates of one ResNet-50 v1.5 forward pass on one image_size x image_size image (or of
    another network of harness/resnet.py's table)."""
    macs, size = 0, image_size

    def conv(c_in: int, c_out: int, kernel: int, stride: int, padding: int) -> None:
        nonlocal macs, size
        size = _conv_out(size, kernel, stride, padding)
        macs += c_in * c_out * kernel * kernel * size * size

    channels = resnet.STEM[model]
    conv(3, channels, 7, 2, 3)
    size = _conv_out(size, 3, 2, 1)  # max pool
    for width, blocks, first_stride in resnet.STAGES[model]:
        for block in range(blocks):
            stride, start = (first_stride if block == 0 else 1), size
            if stride != 1 or channels != width * 4:  # projection shortcut, on the block's input
                macs += channels * width * 4 * _conv_out(start, 1, stride, 0) ** 2
            conv(channels, width, 1, 1, 0)
            conv(width, width, 3, stride, 1)  # v1.5: the stride is here
            conv(width, width * 4, 1, 1, 0)
            channels = width * 4
    return macs + channels * num_classes


def bert_forward_macs(model: str, seq_length: int, predictions: int) -> int:
    """Multiply-accumulates of one BERT pretraining forward pass on one sequence: per layer the Q/K/V and
    output projections (4 L H^2), attention scores and their weighted sum (2 L^2 H) and the feed-forward
    pair (2 L H I); the pooler and NSP head on the first token; the masked-LM head (transform + tied
    decoder over the vocabulary) at the masked positions only, as Google's and NVIDIA's code evaluate it.
    About 2 x parameters x tokens (x3 for training = the usual 6 N T) plus attention."""
    cfg = bert.CONFIGS[model]
    hidden, layers, intermediate, vocab = cfg.hidden_size, cfg.num_layers, cfg.intermediate_size, cfg.vocab_size
    tokens = seq_length
    per_layer = 4 * tokens * hidden * hidden + 2 * tokens * tokens * hidden + 2 * tokens * hidden * intermediate
    heads = hidden * hidden + 2 * hidden + predictions * (hidden * hidden + hidden * vocab)
    return layers * per_layer + heads


def model_flops(
    model: str,
    image_size: int | None = None,
    seq_length: int = AXIS_DEFAULTS["seq_length"],
    predictions: int = 20,
) -> dict[str, float]:
    """Forward MACs and training FLOPs per sample (image, sequence, or Llama's token) of a model at its input
    shape. Llama: PaLM's 6 N + 12 L H T per token (llama.train_flops_per_token), forward = a third of it."""
    if model in resnet.STAGES:
        macs = resnet50_forward_macs(image_size or AXIS_DEFAULTS["image_size"], model=model)
    elif model in bert.CONFIGS:
        macs = bert_forward_macs(model, seq_length, predictions)
    elif model in llama.CONFIGS:
        macs = llama.train_flops_per_token(model, seq_length) // (TRAIN_TO_FORWARD * 2)  # exact: 6 divides it
    else:
        raise ValueError(f"no FLOP count for model {model!r}")
    return {"forward_macs_per_sample": macs, "train_flops_per_sample": TRAIN_TO_FORWARD * 2 * macs}
