"""BERT pretraining the way a Keras user writes it: `model.fit` on an in-memory `tf.data` dataset.

The baseline for the TensorFlow harness's BERT step (as `tensorflow_idiomatic` in frameworks.py is for
ResNet-50): the same model (tf_bert.BertPretraining, the same BertConfig), the same optimizer (AdamW with
bert.OPTIMIZERS["adam"] and its learning-rate schedule, LayerNorm and biases excluded from weight decay),
dropout on, one synthetic batch repeated from memory; the loss through Keras' `compute_loss` hook.

    PYTHONPATH=workflow .venvs/tensorflow-*/bin/python benchmarks/bert_idiomatic_tensorflow.py [--model bert_tiny]

prints the idiomatic loop's and the harness's sequences/s, interleaved ABBA in one process.
Imports only the standard library, numpy and TensorFlow.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import keras_fit


def idiomatic(
    model: str, batch: int, seq_length: int, threads: int, compiler: bool = False
) -> tuple[Callable[[int], float], str]:
    """(train(steps) -> sequences/s of `model.fit` (XLA with compiler) on one in-memory batch, what it is)."""
    import tensorflow as tf

    from dlbench.harness import bert
    from dlbench.harness.backends.tensorflow import bert as tf_bert
    from dlbench.harness.spec import default_max_predictions

    try:  # a harness backend created first has set them already (the runtime takes them only once)
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:
        pass

    class Pretraining(tf_bert.BertPretraining):
        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return tf_bert.pretraining_loss(x, *y_pred)

    cfg = bert.CONFIGS[model]
    net = Pretraining(cfg)
    net.compile(optimizer=tf_bert.make_optimizer("adam", net), jit_compile=compiler)
    features = bert.synthetic_batch(cfg, batch, seq_length, default_max_predictions(seq_length))
    dataset = tf.data.Dataset.from_tensors(features).repeat().prefetch(tf.data.AUTOTUNE)
    net.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)  # trace and build once

    def train(steps: int) -> float:
        return batch * steps / keras_fit.timed_fit(net, dataset, steps, shuffle=False)  # keras_fit.py: why

    return train, (
        f"Keras model.fit on a prefetched in-memory tf.data dataset, jit_compile "
        f"{'on' if compiler else 'off'}, the harness's BERT and AdamW (backends/tensorflow/bert.py)"
    )


def main() -> None:
    from dlbench.harness import rank
    from dlbench.harness.spec import RunSpec

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("bert_tiny", "bert_base"), default="bert_tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--compiler", choices=("off", "on"), default="off")
    args = p.parse_args()

    threads = len(rank.pin_cores())
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec.of(
            framework="tensorflow",
            model=args.model,
            nodes=1,
            devices_per_node=1,
            batch_size=args.batch_size,
            precision="fp32",
            compiler=args.compiler == "on",
            data="synthetic",
            image_size=224,
            warmup_steps=2,
            measured_steps=args.steps,
            repeat=1,
            config_id="bench",
            log=str(Path(tmp) / "run.jsonl"),
            device="cpu",
            seq_length=args.seq_length,
        )
        backend = rank.load_backend(spec, 0, 1, 0, threads)  # first: it sets the framework's threads
        train, _ = idiomatic(args.model, args.batch_size, args.seq_length, threads, compiler=spec.compiler)
        backend.setup()
        backend.setup = lambda: None  # rank.run must not rebuild the model each round
        train(2)
        fit, harness = [], []
        for i in range(args.rounds):
            for which in ("fit", "harness") if i % 2 == 0 else ("harness", "fit"):
                if which == "fit":
                    fit.append(train(args.steps))
                else:
                    harness.append(rank.run(spec, backend, 0, 1, Path(spec.log))["throughput"])
                    Path(spec.log).unlink()
    h, b = statistics.median(harness), statistics.median(fit)
    print(
        f"tensorflow: {args.model} seq {args.seq_length} batch {args.batch_size} fp32, compiler {args.compiler}, "
        f"{threads} threads"
    )
    print(
        f"  model.fit {b:8.2f} sequences/s   harness {h:8.2f} sequences/s   harness/idiomatic {h / b:.3f}"
        f" (rounds: {', '.join(f'{x / y:.3f}' for x, y in zip(harness, fit, strict=True))})"
    )


if __name__ == "__main__":
    main()
