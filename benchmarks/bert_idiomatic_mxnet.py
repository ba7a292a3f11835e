"""The plain MXNet Gluon loop a user writes for BERT pretraining, for benchmarks/frameworks.py.

Same model (mx_bert.BertForPreTraining from the same BertConfig), the same optimizer (Google's
AdamWeightDecay, LayerNorm and biases without weight decay, the learning rate from bert.learning_rate every
step) and a synthetic batch in memory, trained with `autograd.record()` and `gluon.Trainer.step`, synchronised
only at the timed window's ends; hybridized (static_alloc, static_shape) with the compiler on, imperative with it
off, as the harness runs. Imports only the standard library, numpy and MXNet.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import mxnet as mx
from mxnet import autograd, gluon

from dlbench.harness import bert
from dlbench.harness.backends.mxnet import bert as mx_bert
from dlbench.harness.spec import default_max_predictions


def idiomatic(
    model: str, batch: int, seq_length: int, threads: int, compiler: bool = False
) -> tuple[Callable[[int], float], str]:
    """(train(steps) -> sequences/s, what it is). Threads: MXNet reads OMP_NUM_THREADS when it loads (the harness
    backend, imported first, sets it), so `threads` is not set again here."""
    cfg = bert.CONFIGS[model]
    net = mx_bert.BertForPreTraining(cfg)
    net.initialize()
    mx_bert.exclude_from_weight_decay(net)
    loss_fn = mx_bert.PretrainingLoss()
    if compiler:
        net.hybridize(static_alloc=True, static_shape=True)
        loss_fn.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), mx_bert.optimizer("adam"))
    settings = bert.OPTIMIZERS["adam"]
    data = bert.synthetic_batch(cfg, batch, seq_length, default_max_predictions(seq_length))
    inputs = [mx.nd.array(data[name], dtype=data[name].dtype) for name in mx_bert.INPUTS]
    labels = [mx.nd.array(data[name], dtype=data[name].dtype) for name in mx_bert.LABELS]
    step = 0

    def train(steps: int) -> float:
        nonlocal step
        mx.nd.waitall()
        start = time.perf_counter()
        for _ in range(steps):
            trainer.set_learning_rate(bert.learning_rate(settings, step))
            step += 1
            with autograd.record():
                mlm_logits, nsp_logits = net(*inputs)
                loss = loss_fn(mlm_logits, nsp_logits, *labels)
            loss.backward()
            trainer.step(1)  # the loss is already a mean
        mx.nd.waitall()
        return batch * steps / (time.perf_counter() - start)

    mode = "hybridize(static_alloc=True, static_shape=True)" if compiler else "imperative"
    return train, (
        f"Gluon autograd.record() loop, {mode}, gluon.Trainer with the harness's AdamWeightDecay, "
        "mx.nd.waitall only at the window's ends"
    )
