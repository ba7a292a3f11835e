"""BERT pretraining the way a JAX user writes it, for benchmarks/frameworks.py: a Flax TrainState and a jitted step.

The baseline for the JAX harness's BERT step (as `jax_idiomatic` in frameworks.py is for ResNet-50): the same
model (jax_bert.BertPretraining from the same BertConfig), the same optimizer (jax_bert.make_optimizer: optax.adamw
with bert.OPTIMIZERS["adam"], its learning-rate schedule, LayerNorm and biases excluded from weight decay), dropout
on with a key folded with the step, one synthetic batch on the device; flax.training's TrainState, the step under
jax.jit with the state donated, synchronised only at the timed window's ends. JAX always compiles (the harness
has no compiler on). Imports only the standard library, numpy, JAX, Flax and Optax.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import jax
from flax.training import train_state

from dlbench.harness import bert
from dlbench.harness.backends.jax import bert as jax_bert
from dlbench.harness.spec import default_max_predictions


def idiomatic(
    model: str, batch: int, seq_length: int, threads: int, compiler: bool = False
) -> tuple[Callable[[int], float], str]:
    """(train(steps) -> sequences/s, what it is). Threads: XLA's CPU pool follows the process's affinity (the
    harness pinned it), so `threads` is not set again here."""
    cfg = bert.CONFIGS[model]
    net = jax_bert.BertPretraining(cfg)
    params = jax_bert.init(net, jax.random.key(0), seq_length)
    state = train_state.TrainState.create(apply_fn=net.apply, params=params, tx=jax_bert.make_optimizer("adam", params))
    features = jax_bert.batch_arrays(bert.synthetic_batch(cfg, batch, seq_length, default_max_predictions(seq_length)))
    features = jax.device_put(features)
    dropout = jax.random.key(1)

    @partial(jax.jit, donate_argnums=0)
    def train_step(state: train_state.TrainState, features: dict) -> tuple[train_state.TrainState, jax.Array]:
        key = jax.random.fold_in(dropout, state.step)

        def loss_fn(params):
            return state.apply_fn({"params": params}, features, train=True, rngs={"dropout": key})[2]

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    state, _ = train_step(state, features)  # compile once
    jax.block_until_ready(state)

    def train(steps: int) -> float:
        nonlocal state
        start = time.perf_counter()
        for _ in range(steps):
            state, _ = train_step(state, features)
        jax.block_until_ready(state)
        return batch * steps / (time.perf_counter() - start)

    return train, (
        "Flax TrainState + a jax.jit train step, state donated, the harness's BERT and optax.adamw "
        "(backends/jax/bert.py), dropout keys folded with the step, block_until_ready only at the window's ends"
    )
