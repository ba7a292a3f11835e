"""BERT pretraining shards from plain text: google-research/bert create_pretraining_data.py semantics, streamed.

Input: text files with one sentence per line and a blank line between documents (wikitext.py makes them from
a Wikipedia dump), a WordPiece vocab.txt. Output, under --out:
    tfrecord/<name>-00000-of-NNNNN        Google's features (run_pretraining.py _decode_record)
    hdf5/<name>-00000-of-NNNNN.hdf5       NVIDIA's layout (DeepLearningExamples BERT; gzip 1 + shuffle filter)
    manifest.json                         per shard instances, bytes, sha256; the parameters; statistics

Semantics (as create_pretraining_data.py): per document and dupe pass a target length max_seq_length - 3, or
with short_seq_prob a random one in [2, max]; sentences accumulate into chunks up to the target; a chunk
splits into A/B at a random sentence; B is, with probability 1/2 (always for one-sentence chunks), text from
another document (unused sentences go back); the pair is truncated from a random end of the longer side;
[CLS] A [SEP] B [SEP]; num_to_predict = min(P, max(1, round(len * masked_lm_prob))) among the non-special
tokens (whole words with --whole-word-mask), 80% [MASK] / 10% kept / 10% a random vocabulary id; positions
sorted; zero padding; next_sentence_labels 1 = random next.

Differences from the reference. Required by streaming with bounded memory (the reference holds every
instance in memory):
  * documents go to shard (document index mod --shards); each shard is built on its own, with its own
    random stream (seed, shard): output depends on the input, --seed and --shards only (not --workers,
    not --shard-group);
  * the "random next" document is drawn from a window of nearby documents of the same shard (the previous,
    the current and the next block of --random-doc-block documents), not from the whole corpus;
  * the dupe passes run one after the other over each shard, and instances are shuffled in a buffer of
    --shuffle-buffer instances (a full shuffle when the shard has fewer), not globally.
None of these three changes an expected count or share: at a fixed target (no short targets) ours and the plain
algorithm (bert_reference.py) give the same instances (to 0.02%) and random-next and short-length shares (to
0.1 point), in either streaming mode (--shards 1, --random-doc-block >= documents and --shuffle-buffer >=
instances is the reference's: one whole-corpus pool, one full shuffle). With short targets one seed's figures
move by several per cent in the reference itself (a handful of short passes over long documents); compare means
over seeds (benchmarks/dataprep_bert.py).
Smaller ones: a document also ends at the end of an input file; with --whole-word-mask a "##" piece right
after [SEP] starts a word of its own (the reference appends it to A's last word); literal "[MASK]"-like text
is split into "[", "mask", "]" as the reference's tokenizer does (HF's would map it to the special id); the
random draws are numpy's (PCG64), the reference's Python's.

Statistics (manifest.json): masked fraction (predictions / tokens, specials included, as num_to_predict),
the 80/10/10 split, the random-next fraction overall (above 50% in the reference too: one-sentence chunks,
frequent with short targets, always take a random next) and for the coin alone, the short-target fraction of
document passes (10%) and of instances.

Speed: words are tokenised once per distinct whitespace-separated word (the ids of HF tokenizers' full
BertWordPieceTokenizer pipeline on each word, which is what it does to a line: its normaliser and
pre-tokeniser never look across whitespace); a batch's words are found and grouped with numpy on its UTF-8
bytes, words of ASCII letters and digits (which the pipeline leaves as they are) go straight to its WordPiece
model, the others through the whole pipeline. Instances are built with numpy over batches (gathers,
truncation in closed form, masking, padding), Example records encoded for a whole batch at once, HDF5 chunks
shuffled and deflated by us (Intel's ISA-L at levels 1-3) and stored as they are. Two random
streams per shard: one for what makes the instances (targets, chunks, truncation, the shuffle), one for the
masking. Parallel over processes: phase 1, the main process reads the input and hands batches of documents
to the free worker, which tokenises them into its spill files (one per shard, with document indices);
phase 2, one task per shard (largest first) merges its spill files in document order and builds the shard.

Modules: params (parameters, features, statistics, InputError), tokens (vocabulary, documents, word-cached
tokenizer), spill (phase 1's batches and spill files, and reading them back), instances (chunking,
truncation, layout, masking, shuffle buffer), encode (batched Example records), writer (a shard's TFRecord /
HDF5 files), build (the worker processes, phase 2 per shard), manifest (manifest, merge), verify, cli.

    python -m dlbench.dataprep.bert_shards create|merge-manifest|verify ...
"""

import os

# numpy's BLAS starts a thread per core at import, which spins for ~0.1 CPU-s though nothing here calls BLAS
# (the work is one process per core already): set before anything of ours imports numpy
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .cli import main  # noqa: E402

__all__ = ["main"]
