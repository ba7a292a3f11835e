"""The files of one shard: TFRecord (encode.py's records) and/or HDF5 (NVIDIA's layout, gzip), written under
temporary names and renamed into place when complete."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np
from isal import isal_zlib

from dlbench import layout
from dlbench.dataprep.files import sha256_file, temporary

from .encode import example_encoder
from .instances import Batch
from .params import HDF5_DTYPES, INT_FEATURES_L, Params


def import_writers(params: Params) -> None:
    """Import h5py (~30 ms) now if HDF5 is written, rather than when the first shard's file is opened: done by
    the main process before the workers fork, it is done once, not by each worker at its first shard (on the
    1x BERT input, 2 workers: 0.628 -> 0.613 s whole process, median of 8 interleaved runs)."""
    if "hdf5" in params.formats:
        import h5py  # noqa: F401


class ShardWriter:
    """The TFRecord and/or HDF5 file of one shard, written under temporary names and renamed when complete."""

    def __init__(self, out: Path, params: Params, shard: int, vocab_size: int) -> None:
        self.params, self.count = params, 0
        # the files' paths relative to `out` (as the manifest lists them) and where they are written first
        self.relative = {
            fmt: layout.bert_shard(fmt, params.name, shard, params.shards)
            for fmt in layout.BERT_FORMATS
            if fmt in params.formats
        }
        self.final = {fmt: out / path for fmt, path in self.relative.items()}
        self.tmp = {fmt: temporary(path) for fmt, path in self.final.items()}
        for path in self.final.values():
            path.parent.mkdir(parents=True, exist_ok=True)
        if "tfrecord" in self.final:
            self.encoder = example_encoder(params.max_seq_length, params.max_predictions, vocab_size)
            self.tf_file: BinaryIO = open(self.tmp["tfrecord"], "wb")  # noqa: SIM115 - closed in close()
            self.tf_sha = hashlib.sha256()
        if "hdf5" in self.final:
            self._open_hdf5()

    def _open_hdf5(self) -> None:
        import h5py

        L, P = self.params.max_seq_length, self.params.max_predictions
        self.h5 = h5py.File(self.tmp["hdf5"], "w")
        self.chunk_rows = max(64, (1 << 19) // (4 * L))
        self.h5_pending: list[Batch] = []
        self.h5_pending_rows = 0
        self.h5_rows = 0
        level = self.params.hdf5_gzip_level
        self.datasets = {}  # kept: looking a dataset up by name costs ~0.1 ms each time
        for key, dtype in HDF5_DTYPES.items():
            width = () if key == "next_sentence_labels" else ((L,) if key in INT_FEATURES_L else (P,))
            self.datasets[key] = self.h5.create_dataset(
                key,
                shape=(0, *width),
                maxshape=(None, *width),
                dtype=dtype,
                chunks=(self.chunk_rows, *width),
                compression="gzip",
                compression_opts=level,
                shuffle=self.params.hdf5_shuffle,
                track_times=False,
            )

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        self.count += len(batch)
        if "tfrecord" in self.final:
            for lo in range(0, len(batch), 4096):
                buf = self.encoder.encode(batch.take(slice(lo, lo + 4096))).data
                self.tf_file.write(buf)
                self.tf_sha.update(buf)
        if "hdf5" in self.final:
            self.h5_pending.append(batch)
            self.h5_pending_rows += len(batch)
            if self.h5_pending_rows >= self.chunk_rows:
                self._flush_hdf5(final=False)

    def _flush_hdf5(self, final: bool) -> None:
        """Write whole chunks only (each chunk compressed once), the remainder at the end."""
        if not self.h5_pending:
            return
        batch = Batch.concat(self.h5_pending)
        rows = len(batch) if final else (len(batch) // self.chunk_rows) * self.chunk_rows
        head, tail = batch.take(slice(0, rows)), batch.take(slice(rows, None))
        self.h5_pending = [tail] if len(tail) else []
        self.h5_pending_rows = len(tail)
        if not rows:
            return
        lo, hi = self.h5_rows, self.h5_rows + rows
        columns = {
            "input_ids": head.input_ids,
            "input_mask": head.input_mask,
            "segment_ids": head.segment_ids,
            "masked_lm_positions": head.positions,
            "masked_lm_ids": head.masked_ids,
            "next_sentence_labels": head.next_sentence,
        }
        for key, data in columns.items():
            dset = self.datasets[key]
            dset.resize(hi, axis=0)
            for start in range(0, rows, self.chunk_rows):
                chunk = data[start : start + self.chunk_rows]
                dset.id.write_direct_chunk((lo + start,) + (0,) * (data.ndim - 1), self._filtered(chunk))
        self.h5_rows = hi

    def _filtered(self, chunk: np.ndarray) -> bytes:
        """A chunk as the dataset's filters store it: padded to whole (HDF5 stores edge chunks whole), HDF5's
        shuffle (byte k of every element together), deflate. Done here rather than by HDF5, for a faster
        deflate: levels 1-3 with Intel's ISA-L (python-isal; its level 1 deflated these chunks 3.8x faster than
        zlib's level 1 with the run-length strategy, to 2.6% more bytes, and 6x faster than zlib's default
        strategy), 0 (stored) and 4-9 with zlib. Either is a zlib stream: any inflate reads it, and the filter
        pipeline is the dataset's own."""
        if len(chunk) < self.chunk_rows:
            chunk = np.concatenate([chunk, np.zeros((self.chunk_rows - len(chunk), *chunk.shape[1:]), chunk.dtype)])
        raw: np.ndarray = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
        if self.params.hdf5_shuffle and chunk.itemsize > 1:
            raw = raw.reshape(-1, chunk.itemsize).T
        level = self.params.hdf5_gzip_level
        if 1 <= level <= isal_zlib.ISAL_BEST_COMPRESSION:
            return isal_zlib.compress(raw.tobytes(), level)
        return zlib.compress(raw.tobytes(), level)

    def close(self) -> dict:
        """Rename the complete files into place; their manifest entries."""
        sha: dict[str, str] = {}
        if "tfrecord" in self.final:
            self.tf_file.close()
            sha["tfrecord"] = self.tf_sha.hexdigest()
        if "hdf5" in self.final:
            self._flush_hdf5(final=True)
            self.h5.close()
            sha["hdf5"] = sha256_file(self.tmp["hdf5"])
        entries: dict[str, dict] = {}
        for fmt, path in self.final.items():
            os.replace(self.tmp[fmt], path)
            entries[fmt] = {"path": self.relative[fmt], "bytes": path.stat().st_size, "sha256": sha[fmt]}
        return entries

    def abort(self) -> None:
        if "tfrecord" in self.final:
            self.tf_file.close()
        if "hdf5" in self.final:
            self.h5.close()
        for path in self.tmp.values():
            path.unlink(missing_ok=True)
