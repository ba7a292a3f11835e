"""Timing `model.fit` as training, not as fit's teardown (TensorFlow; standard library + TensorFlow only).

Measured on TensorFlow 2.21 / Keras 3: a `fit` call returns only when tf.data's autotuning thread,
started with the call's iterator, next wakes; it sleeps 10 ms, then twice as long each time (10, 20, 40 ms ...). So
the call's wall time snaps up to 10 (2^k - 1) ms after its start (1.27, 2.55, 5.11, 10.23 s were seen again and
again), up to twice the training in it: the Keras loop's rounds fell into two levels ~2x apart, a
bimodal timing. A long training run pays this once; a 20-step round paid it every round.
So the loop is timed by callbacks, over its steps as the harness times its own: from the first step's
`on_train_batch_begin` to the last step's `on_train_batch_end` (each step's batch comes from the prefetched
iterator inside it). Neither the iterator's creation before the first step nor the teardown after the last: with
the short rounds of frameworks.py, a fixed cost per `fit` call would be counted against Keras ~10 times more often
than in one long run.
"""

from __future__ import annotations

import time


def timed_fit(model, dataset, steps: int, **fit_kwargs) -> float:
    """Seconds from the first step's start to the last step's end of one `model.fit` of `steps` steps."""
    import tensorflow as tf

    marks: dict[str, float] = {}

    class Clock(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            marks.setdefault("begin", time.perf_counter())

        def on_train_batch_end(self, batch, logs=None):
            marks["end"] = time.perf_counter()

    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[Clock()], **fit_kwargs)
    return marks["end"] - marks["begin"]
