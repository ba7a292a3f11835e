"""The plain PyTorch loop a strong user writes to pretrain BERT, for benchmarks/frameworks.py: the harness's
model (torch_bert.BertForPreTraining, same BertConfig), AdamW (fused where the device has the kernel) with the
usual decay / no-decay split (no decay for 1-D tensors: biases and LayerNorm, which is exactly Google's exclusion
list here), a linear warm-up/decay LambdaLR, gradients set to None, PyTorch's AMP recipe, cuDNN benchmark and TF32
on CUDA, and one synthetic batch held in memory."""

from __future__ import annotations

import time
from collections.abc import Callable


def idiomatic(
    model: str,
    batch: int,
    seq_length: int,
    threads: int,
    device: str = "cpu",
    precision: str = "fp32",
    compiler: bool = False,
) -> tuple[Callable[[int], float], str]:
    """(train(steps) -> sequences/s of `steps` training steps (eager unless `compiler`; amp: torch_amp.TorchAmp),
    what it is)."""
    import torch
    from torch_amp import TorchAmp, synchronize

    from dlbench.harness import bert
    from dlbench.harness.backends.pytorch.bert import BertForPreTraining
    from dlbench.harness.spec import default_max_predictions

    torch.set_num_threads(threads)
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = bert.CONFIGS[model]
    net = BertForPreTraining(cfg).to(device)
    settings = bert.OPTIMIZERS["adam"]
    params = list(net.parameters())
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": settings.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    hyper = {"lr": settings.learning_rate, "betas": (settings.beta1, settings.beta2), "eps": settings.epsilon}
    try:
        optimizer, kind = torch.optim.AdamW(groups, fused=True, **hyper), "fused"
    except RuntimeError:  # no fused AdamW kernel for this device
        optimizer, kind = torch.optim.AdamW(groups, foreach=True, **hyper), "foreach"
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: bert.learning_rate(settings, step) / settings.learning_rate
    )
    features = bert.synthetic_batch(cfg, batch, seq_length, default_max_predictions(seq_length))
    inputs = {
        k: (torch.from_numpy(v).long() if v.dtype.kind == "i" else torch.from_numpy(v)).to(device)
        for k, v in features.items()
    }
    forward = torch.compile(net) if compiler else net
    amp = TorchAmp(device, precision)

    def train(steps: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with amp.autocast():
                _, _, loss = forward(**inputs)
            amp.step(loss, optimizer)
            scheduler.step()
        synchronize(device)
        return batch * steps / (time.perf_counter() - start)

    cuda = ", cuDNN benchmark, TF32" if device == "cuda" else ""
    return train, (
        f"the harness's BertForPreTraining; AdamW {kind}, LambdaLR, zero_grad(set_to_none=True), "
        f"{amp.describe()}{cuda}, {'torch.compile' if compiler else 'eager'}"
    )
