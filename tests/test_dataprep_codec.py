"""The TFRecord codec both converters and their verification share (workflow/dlbench/dataprep/tfrecord.py): its
scalar half (the ImageNet converter, one record at a time) and its vectorised half (the BERT shards, a batch of
records at once) must write the same bytes. (The tests of each converter read their outputs back with
TensorFlow's, DALI's and MXNet's own readers.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import env_python, run_json


@pytest.fixture(scope="module")
def dataprep_python() -> Path:
    return env_python("dataprep")


def test_scalar_and_vectorised_codec_write_the_same_bytes(dataprep_python):
    facts = run_json(
        dataprep_python,
        """
        import json
        import numpy as np
        from dlbench.dataprep import tfrecord as tfr

        rng = np.random.default_rng(0)
        values = np.concatenate([np.arange(300), rng.integers(0, 1 << 62, 200),
                                 [127, 128, 16383, 16384, 2**63 - 1, -1, -(1 << 40)]])
        scalar = [tfr.varint(int(v)) for v in values]
        slots, valid = tfr.varint_slots(np.arange(1 << 14), 2)
        crcs = rng.integers(0, 1 << 32, 1000, dtype=np.uint64)
        records = [rng.bytes(int(n)) for n in rng.integers(0, 300, 50)] + [b""]
        framed = b"".join(tfr.frame(r) for r in records)
        # the batch path: headers for all lengths at once, zero footers filled in place
        lengths = np.array([len(r) for r in records])
        headers = tfr.record_headers(lengths)
        batch = np.frombuffer(b"".join(h.tobytes() + r + bytes(tfr.FOOTER_BYTES) for h, r in zip(headers, records)),
                              np.uint8).copy()
        ends = np.cumsum(lengths + tfr.OVERHEAD) - tfr.FOOTER_BYTES
        tfr.fill_footers(batch, ends - lengths, ends)
        payload = tfr.varints(np.array([3, 300, 70000]))
        print(json.dumps({
            "varints": tfr.varints(values) == b"".join(scalar),
            "slots": slots[valid].tobytes() == b"".join(scalar[:300]) + b"".join(tfr.varint(v) for v in
                                                                                 range(300, 1 << 14)),
            "lengths": tfr.varint_lengths(values).tolist() == [len(v) for v in scalar],
            "mask": tfr.mask_array(crcs).tolist() == [tfr.mask(int(c)) for c in crcs],
            "frame_parts": b"".join(b"".join(tfr.frame_parts(r[:7], r[7:])) for r in records) == framed,
            "batch": batch.tobytes() == framed,
            "empty_record": tfr.frame(b"")[:8] + tfr.frame(b"")[12:] == bytes(8) + (0xA282EAD8).to_bytes(4, "little"),
            "entry_head_packed": tfr.entry_head("k", tfr.INT64_LIST, len(payload)) + payload
            == tfr.entry("k", tfr.packed_feature(tfr.INT64_LIST, payload)),
            "entry_head_bytes": tfr.entry_head("image", tfr.BYTES_LIST, 300) + bytes(300)
            == tfr.entry("image", tfr.bytes_feature([bytes(300)])),
            "generic_ints": tfr.feature(np.array([1, -2, 300])) == tfr.int64_feature([1, -2, 300]),
            "generic_empty": tfr.feature(np.zeros(0, np.int64)) == tfr.int64_feature([]) == b"\\x1a\\x00",
        }))
    """,
    )
    assert facts == dict.fromkeys(facts, True)
