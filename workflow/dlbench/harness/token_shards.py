"""Llama's real data: the packed token shards of dataprep/llama_tokens.py (layout.py's Llama layout), read
without loading them (standard library and numpy; each backend's data.py turns the batches into its tensors).

Every shard is mapped with np.memmap and cut into windows of seq_length + 1 tokens (inputs and the targets shifted
by one), each starting seq_length after the last, so that every token is a target once; windows do not cross
shard boundaries, and a window may span documents (the end-of-text token between them), as packed pretraining
data does. Rank r takes every world-th window; its windows are visited in an order shuffled by (seed, rank),
again each pass. A batch copies only its own windows out of the maps.

Checked when the reader is built, so before any timed step, each problem naming its file: the manifest readable
and of this format, the tokenizer's vocabulary no larger than the model's, every shard present with the size its
token count gives (a truncated or grown shard), at least one window per rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import layout

FORMAT = "llama_tokens"  # dataprep/llama_tokens.py writes it (the dataprep environment; not imported here)


class TokenDataError(ValueError):
    """Prepared token data this run cannot read; the message names the file and the reason."""


class TokenShards:
    def __init__(
        self, root: Path, model: str, vocab_size: int, seq_length: int, rank: int, world: int, seed: int
    ) -> None:
        root = Path(root)
        manifest_path = root / layout.MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as error:
            raise TokenDataError(f"{manifest_path}: cannot read the token shards' manifest ({error})") from None
        if manifest.get("format") != FORMAT or manifest.get("dtype") not in layout.TOKEN_DTYPES:
            raise TokenDataError(f"{manifest_path}: not a manifest of Llama token shards (format {FORMAT})")
        if manifest["vocab_size"] > vocab_size:
            raise TokenDataError(
                f"{manifest_path}: the tokenizer's vocabulary has {manifest['vocab_size']} tokens, more than "
                f"{model}'s {vocab_size} embeddings: ids beyond them cannot be looked up (prepare the data with "
                f"datasets.llama.vocab_size at most {vocab_size})"
            )
        dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
        self.maps: list[np.memmap] = []
        for entry in manifest["shards"]:
            path = root / entry["file"]
            expected = entry["tokens"] * dtype.itemsize
            size = path.stat().st_size if path.exists() else None
            if size is None:
                raise TokenDataError(f"{path}: a shard the manifest lists is missing")
            if size != expected:
                what = "truncated" if size < expected else "longer than the manifest says"
                raise TokenDataError(
                    f"{path}: {what}: {size} bytes, the manifest says {entry['tokens']} tokens of "
                    f"{dtype.itemsize} bytes ({expected})"
                )
            self.maps.append(np.memmap(path, dtype=dtype, mode="r"))
        self.span = seq_length + 1
        windows = [
            (shard, start)
            for shard, tokens in enumerate(self.maps)
            for start in range(0, len(tokens) - self.span + 1, seq_length)
        ]
        self.windows = windows[rank::world]
        if not self.windows:
            raise TokenDataError(
                f"{root}: {manifest['tokens']} tokens give rank {rank} of {world} no window of "
                f"{self.span} tokens (seq_length + 1): prepare more text or run a shorter seq_length"
            )
        self.tokens, self.vocab_size = manifest["tokens"], manifest["vocab_size"]
        self.rng = np.random.default_rng([seed, rank])
        self.order = self.rng.permutation(len(self.windows))
        self.position = 0

    def batch(self, batch_size: int) -> np.ndarray:
        """The next batch_size windows, [batch_size, seq_length + 1] int64 (a fresh shuffle each pass)."""
        rows = []
        for _ in range(batch_size):
            if self.position == len(self.order):
                self.order, self.position = self.rng.permutation(len(self.windows)), 0
            shard, start = self.windows[self.order[self.position]]
            rows.append(self.maps[shard][start : start + self.span])
            self.position += 1
        return np.stack(rows).astype(np.int64)

    def describe(self) -> str:
        return (
            f"np.memmap token shards ({len(self.maps)}, {self.tokens} tokens, vocabulary {self.vocab_size}), "
            f"{len(self.windows)} windows of {self.span} tokens for this rank, shuffled per pass"
        )
