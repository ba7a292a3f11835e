"""`verify`: every shard the manifest lists is there, reads back (TFRecord: every record's length and CRCs, the
features of the first and last; HDF5: every dataset's dtype and shape, the last chunk) and has the manifest's
bytes and sha256."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dlbench import layout
from dlbench.dataprep import tfrecord as tfr
from dlbench.dataprep.files import check_file

from .params import HDF5_DTYPES, INT_FEATURES_L, INT_FEATURES_P, InputError


class VerifyError(ValueError):
    pass


def verify(args: argparse.Namespace) -> int:
    out: Path = args.out
    manifest_path = args.manifest or out / layout.MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{manifest_path}: unreadable manifest ({exc})") from exc
    params = manifest["parameters"]
    L, P = params["max_seq_length"], params["max_predictions"]
    expected_tf = {
        **{k: L for k in INT_FEATURES_L},
        **{k: P for k in INT_FEATURES_P},
        "masked_lm_weights": P,
        "next_sentence_labels": 1,
    }
    checked = 0
    for shard in manifest["shards"]:
        n = shard["instances"]
        if "tfrecord" in shard:
            path = out / shard["tfrecord"]["path"]
            if not path.is_file():
                raise VerifyError(f"{path}: missing")
            count = 0
            try:
                for index, (_, data) in enumerate(tfr.read_records(path)):
                    if index == 0 or index == n - 1:
                        features = tfr.parse_example(data)
                        got = {k: len(v) for k, v in features.items()}
                        if got != expected_tf:
                            raise VerifyError(f"{path}: record {index}: features {got}, expected {expected_tf}")
                    count += 1
            except tfr.CorruptRecord as exc:
                raise VerifyError(str(exc)) from exc
            if count != n:
                raise VerifyError(f"{path}: {count} records, the manifest says {n}")
            _check_file(path, shard["tfrecord"])
        if "hdf5" in shard:
            import h5py

            path = out / shard["hdf5"]["path"]
            if not path.is_file():
                raise VerifyError(f"{path}: missing")
            try:
                with h5py.File(path, "r") as f:
                    for key, dtype in HDF5_DTYPES.items():
                        shape = (n,) if key == "next_sentence_labels" else (n, L if key in INT_FEATURES_L else P)
                        if key not in f:
                            raise VerifyError(f"{path}: no dataset {key}")
                        d = f[key]
                        if d.shape != shape or d.dtype != np.dtype(dtype):
                            raise VerifyError(
                                f"{path}: {key} is {d.dtype}{list(d.shape)}, expected {np.dtype(dtype)}{list(shape)}"
                            )
                        if n:
                            d[n - 1]  # reads (and decompresses) the last chunk
            except OSError as exc:
                raise VerifyError(f"{path}: not a readable HDF5 file ({exc})") from exc
            _check_file(path, shard["hdf5"])
        checked += 1
    print(json.dumps({"verified": str(manifest_path), "shards": checked, "instances": manifest["instances"]}))
    return 0


def _check_file(path: Path, entry: dict) -> None:
    for problem in check_file(path, entry):
        raise VerifyError(problem)
