"""Framed tf.train.Example records (run_pretraining.py's features) for a whole batch of instances at once, built
on the vectorised half of the TFRecord codec (dataprep/tfrecord.py)."""

from __future__ import annotations

import functools

import numpy as np

from dlbench.dataprep import tfrecord as tfr

from .instances import Batch

_EXAMPLE_TAG = np.frombuffer(tfr.tag(1), np.uint8)[None, :]  # Example.features


class ExampleEncoder:
    """Framed tf.train.Example records for a whole batch at once.

    Each record is laid out as a row of fixed-width slots (record header, example header, per feature its
    framing and its packed payload, record footer); varints sit in slots of their maximum width with a validity
    mask. Compacting the valid bytes of all rows gives every record, already concatenated; only the data CRCs
    are then computed per record (google-crc32c) and written into the footers in place."""

    def __init__(self, L: int, P: int, vocab_size: int) -> None:
        self.L, self.P = L, P
        # the varint of every possible id / position in a 4-byte slot, and which of its bytes are used:
        # looked up with one gather per array rather than computed per value
        data, valid = tfr.varint_slots(np.arange(max(vocab_size, L)), 3)
        table = np.zeros((len(data), 4), np.uint8)
        table[:, :3] = data
        self.table = table.view("<u4").ravel()
        table_valid = np.zeros((len(data), 4), bool)
        table_valid[:, :3] = valid
        self.table_valid = table_valid.view("<u4").ravel()
        self.table_len = valid.sum(axis=1).astype(np.uint8)
        # framing of the variable-length features, by payload length (a varint is 1..3 bytes per value)
        self.headers = {
            key: self._header_table(key, 3 * width)
            for key, width in (("input_ids", L), ("masked_lm_positions", P), ("masked_lm_ids", P))
        }
        # the fixed-length features: constant framing
        self.fixed = {
            key: np.frombuffer(tfr.entry_head(key, kind, size), np.uint8)
            for key, kind, size in (
                ("input_mask", tfr.INT64_LIST, L),
                ("segment_ids", tfr.INT64_LIST, L),
                ("masked_lm_weights", tfr.FLOAT_LIST, 4 * P),
                ("next_sentence_labels", tfr.INT64_LIST, 1),
            )
        }

    @staticmethod
    def _header_table(key: str, max_payload: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bytes [m, w], valid [m, w], total entry length [m]) of the entry framing for payload lengths 0..m-1."""
        headers = [tfr.entry_head(key, tfr.INT64_LIST, n) for n in range(max_payload + 1)]
        width = max(map(len, headers))
        data = np.zeros((len(headers), width), np.uint8)
        valid = np.zeros((len(headers), width), bool)
        for n, h in enumerate(headers):
            data[n, : len(h)] = np.frombuffer(h, np.uint8)
            valid[n, : len(h)] = True
        return data, valid, np.array([len(h) + n for n, h in enumerate(headers)], np.int64)

    def _varints(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bytes [n, 4k], valid [n, 4k], payload length [n]) of rows of small non-negative ints."""
        n = len(values)
        data = self.table[values].view(np.uint8).reshape(n, -1)
        valid = self.table_valid[values].view(bool).reshape(n, -1)
        return data, valid, self.table_len[values].sum(axis=1, dtype=np.int64)

    def encode(self, b: Batch) -> np.ndarray:
        """All records of the batch, framed and concatenated."""
        n, P = len(b), self.P
        weights = (np.arange(P)[None, :] < b.num_predictions[:, None]).astype("<f4")
        slots: list[tuple[np.ndarray, np.ndarray | None]] = []  # (bytes [n or 1, w], valid or None)
        features_len = np.zeros(n, np.int64)
        for key, values in (
            ("input_ids", b.input_ids),
            ("input_mask", b.input_mask),
            ("segment_ids", b.segment_ids),
            ("masked_lm_positions", b.positions),
            ("masked_lm_ids", b.masked_ids),
            ("masked_lm_weights", weights),
            ("next_sentence_labels", b.next_sentence),
        ):
            if key in self.headers:
                data, valid, payload_len = self._varints(values)
                head, head_valid, entry_len = self.headers[key]
                slots += [(head[payload_len], head_valid[payload_len]), (data, valid)]
                features_len += entry_len[payload_len]
            else:
                payload = values.view(np.uint8).reshape(n, -1)  # 0/1 ints are one-byte varints; floats raw
                slots += [(self.fixed[key][None, :], None), (payload, None)]
                features_len += len(self.fixed[key]) + payload.shape[1]
        example_head, example_head_valid = tfr.varint_slots(features_len, 3)
        example_len = len(_EXAMPLE_TAG[0]) + example_head_valid.sum(axis=1) + features_len
        slots = [
            (tfr.record_headers(example_len), None),
            (_EXAMPLE_TAG, None),
            (example_head, example_head_valid),
            *slots,
            (np.zeros((1, tfr.FOOTER_BYTES), np.uint8), None),
        ]

        # lay the slots side by side, then compact the valid bytes
        edges = np.concatenate(([0], np.cumsum([data.shape[1] for data, _ in slots])))
        rows = np.empty((n, int(edges[-1])), np.uint8)
        valid = np.ones((n, int(edges[-1])), bool)
        for (data, ok), lo, hi in zip(slots, edges[:-1], edges[1:], strict=True):
            rows[:, lo:hi] = data
            if ok is not None:
                valid[:, lo:hi] = ok
        # np.compress: 2-3x faster than rows[valid] on such masks, but it gathers through an int64 index per
        # kept byte: compacted 512 rows at a time, that index stays small (~3 MB). The records' lengths say how
        # many bytes each row keeps (no pass over the mask to count them)
        record_ends = np.cumsum(example_len + tfr.OVERHEAD)
        records = np.empty(int(record_ends[-1]), np.uint8)
        start = 0
        for lo in range(0, n, 512):
            end = int(record_ends[min(lo + 512, n) - 1])
            np.compress(valid[lo : lo + 512].ravel(), rows[lo : lo + 512].ravel(), out=records[start:end])
            start = end
        ends = record_ends - tfr.FOOTER_BYTES
        tfr.fill_footers(records, ends - example_len, ends)
        return records


@functools.lru_cache(maxsize=4)
def example_encoder(L: int, P: int, vocab_size: int) -> ExampleEncoder:
    """One encoder per process (its tables take a few milliseconds to build; a process builds many shards)."""
    return ExampleEncoder(L, P, vocab_size)
