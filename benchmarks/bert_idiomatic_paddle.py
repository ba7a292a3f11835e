"""BERT pretraining the way a PaddlePaddle user writes it, for benchmarks/frameworks.py: a plain dygraph loop.

The baseline for the Paddle harness's BERT step (as `paddle_idiomatic` in frameworks.py is for ResNet-50): the same
model (paddle_bert.BertForPreTraining from the same BertConfig), the same optimizer (paddle_bert.make_optimizer:
paddle.optimizer.AdamW with bert.OPTIMIZERS["adam"], its learning-rate schedule, LayerNorm and biases excluded from
weight decay), dropout on, one synthetic batch; forward, loss.backward(), optimizer.step(), the schedule's step,
optimizer.clear_grad() as Paddle's examples order them; with the compiler on the model under paddle.jit.to_static.
The loss is read back only at the window's end. Imports only the standard library, numpy and Paddle.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import paddle

from dlbench.harness import bert
from dlbench.harness.backends.paddle import bert as paddle_bert
from dlbench.harness.spec import default_max_predictions


def idiomatic(
    model: str, batch: int, seq_length: int, threads: int, compiler: bool = False
) -> tuple[Callable[[int], float], str]:
    """(train(steps) -> sequences/s, what it is). Threads: Paddle's own setting, made by the harness backend before
    (settings_in_effect), so not set again here."""
    paddle.set_device("cpu")
    cfg = bert.CONFIGS[model]
    net = paddle_bert.BertForPreTraining(cfg)
    optimizer, schedule = paddle_bert.make_optimizer(net, "adam", bert.OPTIMIZERS["adam"])
    step_model = paddle.jit.to_static(net, full_graph=True) if compiler else net
    features = bert.synthetic_batch(cfg, batch, seq_length, default_max_predictions(seq_length))
    inputs = paddle_bert.batch_tensors(features)

    def train(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            _, _, loss = step_model(**inputs)
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.clear_grad()
        float(loss)  # the last step's loss on the host: the window ends when its update has run
        return batch * steps / (time.perf_counter() - start)

    mode = "paddle.jit.to_static" if compiler else "dygraph"
    return train, (
        f"Paddle {mode} loop, the harness's BERT and paddle.optimizer.AdamW (backends/paddle/bert.py), "
        "clear_grad after the step, the loss read back only at the window's end"
    )
