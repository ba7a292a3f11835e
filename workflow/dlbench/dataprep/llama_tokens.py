"""Llama's real data: text -> a byte-level BPE trained on it -> packed token shards (the Llama layout of
dlbench/layout.py).

    python -m dlbench.dataprep.llama_tokens create --input wiki.txt [...] --out DIR --vocab-size 8192 --shards 4
    python -m dlbench.dataprep.llama_tokens verify --out DIR

Input: the text BERT's shards are made of (dataprep/wikitext.py: one sentence per line, a blank line between
documents). A document is its lines joined by newlines.

The tokenizer: a byte-level BPE (GPT-2's and Llama 3's kind: every byte is a token, so no text is unknown) trained
with Hugging Face `tokenizers` on these documents, with one special token, <|end_of_text|> (id 0). Training is
deterministic: the same documents and vocabulary size give the same tokenizer.json, byte for byte (tested).
Its vocabulary may come out smaller than asked when the text has fewer merges to learn; the manifest records the
real size, which a run checks against its model's.

The shards: the documents in input order, each followed by <|end_of_text|>, split into `shards` files of
consecutive documents, each a flat array of little-endian token ids (uint16 while the vocabulary fits, else
uint32) with no header: a reader maps it (np.memmap) and slices windows of seq_length + 1 tokens.
`verify` checks every shard's size against the manifest, every id against the vocabulary and the documents'
end-of-text count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..layout import MANIFEST, TOKEN_DTYPES, TOKENIZER, token_dtype, token_shard, token_shards
from .files import temporary, write_json

EOT = "<|end_of_text|>"
FORMAT = "llama_tokens"
ENCODE_BATCH = 256  # documents per encode_batch call


def read_documents(paths: list[Path]) -> Iterator[str]:
    """The documents of the inputs in order: runs of non-blank lines, joined by newlines."""
    for path in paths:
        lines: list[str] = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.strip():
                    lines.append(line)
                elif lines:
                    yield "\n".join(lines)
                    lines = []
        if lines:
            yield "\n".join(lines)


def train_tokenizer(documents: list[str], vocab_size: int):
    """A byte-level BPE with <|end_of_text|> as id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return tokenizer


def create(inputs: list[Path], out: Path, vocab_size: int, shards: int) -> dict:
    documents = list(read_documents(inputs))
    if len(documents) < shards:
        raise SystemExit(f"{', '.join(map(str, inputs))}: {len(documents)} documents, fewer than {shards} shards")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(documents, vocab_size)
    tokenizer.save(str(temporary(out / TOKENIZER)))
    os.replace(temporary(out / TOKENIZER), out / TOKENIZER)
    vocab, eot = tokenizer.get_vocab_size(), tokenizer.token_to_id(EOT)
    dtype = token_dtype(vocab)
    entries: list[dict[str, Any]] = []
    for index in range(shards):
        mine = documents[index * len(documents) // shards : (index + 1) * len(documents) // shards]
        ids: list[int] = []
        for start in range(0, len(mine), ENCODE_BATCH):
            for encoding in tokenizer.encode_batch(mine[start : start + ENCODE_BATCH]):
                ids += [*encoding.ids, eot]
        name = token_shard(index, shards)
        np.asarray(ids, dtype=np.dtype(dtype).newbyteorder("<")).tofile(temporary(out / name))
        os.replace(temporary(out / name), out / name)  # a shard under its name is whole
        entries.append({"file": name, "tokens": len(ids), "documents": len(mine)})
    manifest = {
        "format": FORMAT,
        "tokenizer": TOKENIZER,
        "vocab_size": vocab,
        "requested_vocab_size": vocab_size,
        "eot_id": eot,
        "dtype": dtype,
        "documents": len(documents),
        "tokens": sum(e["tokens"] for e in entries),
        "shards": entries,
        "inputs": [Path(p).name for p in inputs],
    }
    write_json(out / MANIFEST, manifest)
    return manifest


def problems(out: Path) -> list[str]:
    """What is wrong with a prepared directory, each naming its file."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        return [f"{out / MANIFEST}: unreadable ({error})"]
    found = []
    listed = {e["file"] for e in manifest["shards"]}
    on_disk = {p.name for p in token_shards(out)}
    found += [f"{out / name}: listed in the manifest but missing" for name in sorted(listed - on_disk)]
    found += [f"{out / name}: a shard the manifest does not list" for name in sorted(on_disk - listed)]
    width = TOKEN_DTYPES[manifest["dtype"]]
    for entry in manifest["shards"]:
        path = out / entry["file"]
        if not path.exists():
            continue
        if path.stat().st_size != entry["tokens"] * width:
            found.append(f"{path}: {path.stat().st_size} bytes, the manifest says {entry['tokens']} tokens x {width}")
            continue
        ids = np.memmap(path, dtype=np.dtype(manifest["dtype"]).newbyteorder("<"), mode="r")
        if len(ids) and int(ids.max()) >= manifest["vocab_size"]:
            found.append(f"{path}: token id {int(ids.max())} >= the vocabulary's {manifest['vocab_size']}")
        if int(np.count_nonzero(ids == manifest["eot_id"])) != entry["documents"]:
            found.append(f"{path}: end-of-text tokens do not match its {entry['documents']} documents")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.dataprep.llama_tokens")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="train the BPE and write the token shards and manifest")
    c.add_argument("--input", type=Path, nargs="+", required=True, help="text: a blank line between documents")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--vocab-size", type=int, default=8192)
    c.add_argument("--shards", type=int, default=4)
    v = sub.add_parser("verify", help="check the shards against the manifest and the vocabulary")
    v.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.command == "create":
        m = create(args.input, args.out, args.vocab_size, args.shards)
        print(
            f"dlbench: {m['documents']} documents, {m['tokens']} tokens ({m['dtype']}, vocabulary {m['vocab_size']}) "
            f"in {len(m['shards'])} shards under {args.out}"
        )
        return 0
    found = problems(args.out)
    for problem in found:
        print(f"dlbench: {problem}", file=sys.stderr)
    if not found:
        print(f"dlbench: {args.out}: token shards verified")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
