"""The plain PyTorch loop a user writes to pretrain BERT, for benchmarks/frameworks.py: the harness's
model (torch_bert.BertForPreTraining, same BertConfig), AdamW with the usual decay / no-decay split (no
decay for 1-D tensors: biases and LayerNorm, which is exactly Google's exclusion list here), a linear
warm-up/decay LambdaLR, and one synthetic batch held in memory."""

from __future__ import annotations

import time
from collections.abc import Callable


def idiomatic(model: str, batch: int, seq_length: int, threads: int, device: str = "cpu", precision: str = "fp32",
              compiler: bool = False) -> Callable[[int], float]:
    """train(steps) -> sequences/s of `steps` training steps (eager unless `compiler`; amp: torch_amp.TorchAmp)."""
    import torch
    from torch_amp import TorchAmp, synchronize

    from dlbench.harness import bert
    from dlbench.harness.backends.pytorch.bert import BertForPreTraining
    from dlbench.harness.spec import default_max_predictions

    torch.set_num_threads(threads)
    cfg = bert.CONFIGS[model]
    net = BertForPreTraining(cfg).to(device)
    settings = bert.OPTIMIZERS["adam"]
    params = list(net.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.ndim >= 2], "weight_decay": settings.weight_decay},
         {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
        lr=settings.learning_rate, betas=(settings.beta1, settings.beta2), eps=settings.epsilon)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: bert.learning_rate(settings, step) / settings.learning_rate)
    features = bert.synthetic_batch(cfg, batch, seq_length, default_max_predictions(seq_length))
    inputs = {k: (torch.from_numpy(v).long() if v.dtype.kind == "i" else torch.from_numpy(v)).to(device)
              for k, v in features.items()}
    forward = torch.compile(net) if compiler else net
    amp = TorchAmp(device, precision)

    def train(steps: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            with amp.autocast():
                _, _, loss = forward(**inputs)
            amp.step(loss, optimizer)
            scheduler.step()
        synchronize(device)
        return batch * steps / (time.perf_counter() - start)

    return train

