"""google-research/bert's create_pretraining_data.py, unmodified, under TensorFlow 2 (run by dataprep_bert.py
with the tensorflow environment's python; imports only the standard library and TensorFlow).

    python benchmarks/google_bert.py run BERT_DIR [the script's flags]   # stderr ends with {"self_mb": peak RSS}
    python benchmarks/google_bert.py count FILE.tfrecord MAX_SEQ_LENGTH  # stdout: {"instances", "random_next",
                                                                          #          "short_length"}
    python benchmarks/google_bert.py compare A.tfrecord B.tfrecord MAX_SEQ_LENGTH MAX_PREDICTIONS
                                    # stdout: {"records": [a, b], "differing": records whose features differ}

BERT_DIR is the user's own checkout of https://github.com/google-research/bert (dlbench does not ship it). The
script was written for TensorFlow 1 (`tf.flags`, `tf.gfile`, `tf.python_io`): `tensorflow.compat.v1` stands in
for `tensorflow` while it runs, the whole change.
"""

from __future__ import annotations

import json
import resource
import runpy
import sys


def run(bert_dir: str, flags: list[str]) -> None:
    import tensorflow.compat.v1 as tf

    sys.modules["tensorflow"] = tf  # the script's `import tensorflow as tf` gets the TF 1 API
    sys.path.insert(0, bert_dir)  # its `import tokenization`
    script = f"{bert_dir}/create_pretraining_data.py"
    sys.argv = [script, *flags]
    try:
        runpy.run_path(script, run_name="__main__")  # ends in tf.app.run's sys.exit
    except SystemExit as end:
        if end.code:
            raise
    print(json.dumps({"self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr)


def features(max_seq_length: int, max_predictions: int = 0) -> dict:
    import tensorflow as tf

    out = {
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
    if max_predictions:  # every feature run_pretraining.py reads
        out |= {
            "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([max_predictions], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([max_predictions], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([max_predictions], tf.float32),
        }
    return out


def batches(path: str, spec: dict):
    import tensorflow as tf

    return tf.data.TFRecordDataset(path).batch(4096).map(lambda r: tf.io.parse_example(r, spec))


def compare(a: str, b: str, max_seq_length: int, max_predictions: int) -> None:
    """Record by record, in order: how many records differ in any feature (the bytes may differ in the order
    a writer puts the features in)."""
    import tensorflow as tf

    spec = features(max_seq_length, max_predictions)
    sizes, differing = [0, 0], 0
    for x, y in zip(batches(a, spec), batches(b, spec), strict=False):
        rows = min(int(x["input_mask"].shape[0]), int(y["input_mask"].shape[0]))
        same = tf.ones([rows], tf.bool)
        for key in spec:
            same &= tf.reduce_all(tf.equal(x[key][:rows], y[key][:rows]), axis=1)
        differing += rows - int(tf.reduce_sum(tf.cast(same, tf.int64)))
    for i, path in enumerate((a, b)):
        sizes[i] = sum(1 for _ in tf.data.TFRecordDataset(path))
    print(json.dumps({"records": sizes, "differing": differing + abs(sizes[0] - sizes[1])}))


def count(path: str, max_seq_length: int) -> None:
    """Issue 19's counts, read back from the records: instances, random next, shorter than 90% of the length."""
    import tensorflow as tf

    counts = {"instances": 0, "random_next": 0, "short_length": 0}
    for batch in batches(path, features(max_seq_length)):
        lengths = tf.reduce_sum(batch["input_mask"], axis=1)
        counts["instances"] += int(lengths.shape[0])
        counts["random_next"] += int(tf.reduce_sum(batch["next_sentence_labels"]))
        short = tf.cast(lengths, tf.float32) < 0.9 * max_seq_length
        counts["short_length"] += int(tf.reduce_sum(tf.cast(short, tf.int64)))
    print(json.dumps(counts))


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["--help"]
    if command == "run" and rest:
        run(rest[0], rest[1:])
    elif command == "count" and len(rest) == 2:
        count(rest[0], int(rest[1]))
    elif command == "compare" and len(rest) == 4:
        compare(rest[0], rest[1], int(rest[2]), int(rest[3]))
    else:
        sys.exit(__doc__)
