"""google-research/bert create_pretraining_data.py's algorithm written plainly: one process, Python's random,
every document and instance in memory, random next sentences from the whole corpus. Not for production: it is
what bert_shards (streaming, bounded memory) is checked against (tests: statistics) and timed against
(benchmarks/dataprep_bert.py: the same-run baseline).

    python -m dlbench.dataprep.bert_reference --input TEXT --vocab VOCAB [--out FILE.tfrecord] [--dupe-factor 5]
        [--short-seq-prob 0.1] [--max-seq-length 128] [--max-predictions 20] [--seed 12345]

Prints one JSON line: instances and counts (random next, forced random next, truncated pairs, tokens,
predictions, [MASK]/kept/random replacements, document passes, short-target passes and their instances,
instances shorter than 90% of max_seq_length).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys

from tokenizers import BertWordPieceTokenizer

from . import tfrecord

MASKED_LM_PROB = 0.15


def documents(text: str, vocab: str) -> list[list[list[int]]]:
    """Documents (blank-line separated) of sentences (lines) of WordPiece ids."""
    tokenizer = BertWordPieceTokenizer(vocab, lowercase=True)
    docs: list[list[list[int]]] = [[]]
    lines: list[str] = []

    def flush() -> None:
        docs[-1].extend(e.ids for e in tokenizer.encode_batch(lines, add_special_tokens=False) if e.ids)
        lines.clear()

    with open(text, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.strip())
            else:
                flush()
                docs.append([])
    flush()
    return [d for d in docs if d]


def create(
    docs: list[list[list[int]]],
    vocab_size: int,
    special: dict[str, int],
    seq_length: int,
    predictions: int,
    dupe_factor: int,
    short_seq_prob: float,
    seed: int,
) -> tuple[list[tuple], dict[str, int]]:
    """(instances as (ids, segment ids, positions, labels, is random next), counts)."""
    rng = random.Random(seed)
    rng.shuffle(docs)
    max_tokens = seq_length - 3
    s = dict(
        instances=0,
        random_next=0,
        forced=0,
        truncated=0,
        tokens=0,
        predictions=0,
        mask=0,
        kept=0,
        passes=0,
        short=0,
        short_instances=0,
        short_length=0,
    )
    instances = []
    for _ in range(dupe_factor):
        for index, doc in enumerate(docs):
            s["passes"] += 1
            target, short = max_tokens, False
            if rng.random() < short_seq_prob:
                target, short = rng.randint(2, max_tokens), True
                s["short"] += 1
            chunk, length, i = [], 0, 0
            while i < len(doc):
                chunk.append(doc[i])
                length += len(doc[i])
                if i == len(doc) - 1 or length >= target:
                    n_a = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                    a = [t for sent in chunk[:n_a] for t in sent]
                    nsp = int(len(chunk) == 1 or rng.random() < 0.5)
                    if nsp:
                        s["forced"] += len(chunk) == 1
                        for _ in range(10):
                            other = rng.randint(0, len(docs) - 1)
                            if other != index:
                                break
                        b = []
                        for sent in docs[other][rng.randint(0, len(docs[other]) - 1) :]:
                            b += sent
                            if len(b) >= target - len(a):
                                break
                        i -= len(chunk) - n_a  # the unused sentences of A's chunk go back
                    else:
                        b = [t for sent in chunk[n_a:] for t in sent]
                    s["truncated"] += len(a) + len(b) > max_tokens
                    while len(a) + len(b) > max_tokens:
                        longer = a if len(a) > len(b) else b
                        del longer[0 if rng.random() < 0.5 else -1]
                    ids = [special["[CLS]"], *a, special["[SEP]"], *b, special["[SEP]"]]
                    segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
                    candidates = list(range(1, len(a) + 1)) + list(range(len(a) + 2, len(ids) - 1))
                    rng.shuffle(candidates)
                    chosen = candidates[: min(predictions, max(1, round(len(ids) * MASKED_LM_PROB)))]
                    picked = sorted(chosen)
                    labels = [ids[j] for j in picked]
                    for j in chosen:  # the draws in the shuffled order, as Google's script: the same instances
                        if rng.random() < 0.8:
                            ids[j] = special["[MASK]"]
                            s["mask"] += 1
                        elif rng.random() < 0.5:
                            s["kept"] += 1
                        else:
                            ids[j] = rng.randint(0, vocab_size - 1)
                    instances.append((ids, segments, picked, labels, nsp))
                    s["instances"] += 1
                    s["random_next"] += nsp
                    s["short_instances"] += short
                    s["tokens"] += len(ids)
                    s["short_length"] += len(ids) < 0.9 * seq_length
                    s["predictions"] += len(picked)
                    chunk, length = [], 0
                i += 1
    rng.shuffle(instances)
    return instances, s


def write(path: str, instances: list[tuple], seq_length: int, predictions: int) -> None:
    with tfrecord.TFRecordWriter(path) as w:
        for ids, segments, picked, labels, nsp in instances:
            pad, free = seq_length - len(ids), predictions - len(picked)
            w.write(
                tfrecord.example(
                    {
                        "input_ids": ids + [0] * pad,
                        "input_mask": [1] * len(ids) + [0] * pad,
                        "segment_ids": segments + [0] * pad,
                        "masked_lm_positions": picked + [0] * free,
                        "masked_lm_ids": labels + [0] * free,
                        "masked_lm_weights": [1.0] * len(picked) + [0.0] * free,
                        "next_sentence_labels": [nsp],
                    }
                )
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.dataprep.bert_reference", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, help="text: one sentence per line, blank line between documents")
    p.add_argument("--vocab", required=True)
    p.add_argument("--out", help="write the instances as one TFRecord file (Google's features)")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--max-predictions", type=int, default=20)
    p.add_argument("--dupe-factor", type=int, default=5)
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=12345)
    args = p.parse_args(argv)
    with open(args.vocab, encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    special = {token: vocab.index(token) for token in ("[CLS]", "[SEP]", "[MASK]")}
    instances, counts = create(
        documents(args.input, args.vocab),
        len(vocab),
        special,
        args.max_seq_length,
        args.max_predictions,
        args.dupe_factor,
        args.short_seq_prob,
        args.seed,
    )
    if args.out:
        write(args.out, instances, args.max_seq_length, args.max_predictions)
    report: dict[str, float] = {**counts, "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
