"""The shard layout (workflow/dlbench/layout.py): the names the converters write their shards, index files
and manifests by and the harness finds them by (harness/datasets.py), importable with the standard library alone
(the harness imports it inside framework environments)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from conftest import run_env
from dlbench import layout
from dlbench.harness import datasets


def test_shard_names_parse_back_and_listings_skip_other_files(tmp_path):
    assert layout.shard_name("train", 3, 1024) == "train-00003-of-01024"
    assert layout.parse_shard_name("train-00003-of-01024") == ("train", 3, 1024)
    assert layout.parse_shard_name("wiki.en_1-00000-of-00002") == ("wiki.en_1", 0, 2)
    for other in (
        "train-3-of-1024",
        ".train-00000-of-00002.tmp",
        "train-00000-of-00002.idx",
        "manifest.json",
        "wiki-00000-of-00002.hdf5",
    ):
        assert layout.parse_shard_name(other) is None, other
    for name in (
        "train-00001-of-00002",
        "train-00000-of-00002",
        ".train-00000-of-00002.tmp",
        "validation-00000-of-00001",
        "train-00000-of-00002.idx",
        "dali_index/train-00000-of-00002.idx",
        "dali_index/train-00001-of-00002.idx",
        "tfrecord/wiki-00000-of-00002",
        "tfrecord/.wiki-00001-of-00002.tmp",
        "tfrecord/wiki-00000-of-00002.hdf5",
        "hdf5/wiki-00000-of-00001.hdf5",
        "hdf5/wiki-00000-of-00001",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in layout.imagenet_shards(tmp_path, "train")] == [
        "train-00000-of-00002",
        "train-00001-of-00002",
    ]
    assert [p.name for p in layout.shard_files(tmp_path, layout.IMAGENET_SPLITS)] == [
        "train-00000-of-00002",
        "train-00001-of-00002",
        "validation-00000-of-00001",
    ]
    assert [str(p.relative_to(tmp_path)) for p in layout.bert_shards(tmp_path, "tfrecord")] == [
        layout.bert_shard("tfrecord", "wiki", 0, 2)
    ]
    assert (
        [str(p.relative_to(tmp_path)) for p in layout.bert_shards(tmp_path, "hdf5")]
        == [layout.bert_shard("hdf5", "wiki", 0, 1)]
        == ["hdf5/wiki-00000-of-00001.hdf5"]
    )
    # the harness finds the same files by the same names
    spec = SimpleNamespace(data_dir=str(tmp_path), seq_length=128, predictions=20, quality="")  # what readers use
    shards, indexes = datasets.imagenet_train_shards(spec)
    assert indexes == [str(tmp_path / layout.dali_index(Path(s).name)) for s in shards]
    assert [Path(s).name for s in shards] == ["train-00000-of-00002", "train-00001-of-00002"]
    assert datasets.bert_shards(spec, "hdf5") == [str(tmp_path / "hdf5/wiki-00000-of-00001.hdf5")]


def test_the_layout_and_the_harness_readers_need_only_the_standard_library():
    code = "import sys; sys.modules['numpy'] = None; import dlbench.layout, dlbench.harness.datasets; print('ok')"
    assert run_env(sys.executable, "-S", "-c", code).stdout.strip() == "ok"
