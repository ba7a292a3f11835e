"""A small ImageNet-layout tree cut from the real photos in scikit-image's wheel (no network here).

Input: the scikit-image wheel (its `skimage/data/*.jpg|png` photos) and the tensorflow-datasets wheel
(`tensorflow_datasets/datasets/imagenet2012/labels.txt`: the 1,000 real ILSVRC-2012 synsets, sorted), both
fetched beforehand with `pip download --no-deps scikit-image==0.26.0 tensorflow-datasets==4.9.10 -d DIR`.
Each image is a random crop (scale, aspect), flip, brightness change and resize of one photo, JPEG-encoded at a
random quality, so every file differs. The photo is drawn at random per image, so labels carry no signal
(throughput only); with `--photo-per-class` class i is cut from photo i, so a model can learn to tell the classes
apart and held-out images (other crops of the same photos) measure it (time-to-quality studies). As in the real
set, a few files are odd: `--png` files hold PNG data under a .JPEG name, `--cmyk` are CMYK JPEGs and `--gray`
grayscale JPEGs (5% by default).

Output (`--out DIR`):
    train/<wnid>/<wnid>_<n>.JPEG
    validation/ILSVRC2012_val_<8 digits>.JPEG + validation_labels.txt (one wnid per line, file-name order:
        the format of ILSVRC's validation ground truth), or validation/<wnid>/... with --validation-layout folders
    synsets.txt          the 1,000 synsets (labels.txt), so labels are the real ImageNet ones (1..1000)
    metadata.txt         "<wnid>\\t<name>" for the synsets used
    bounding_boxes.csv   "<file>,<xmin>,<ymin>,<xmax>,<ymax>" normalised (build_imagenet_data.py's input)
    sample.json          what was made from what
Same wheels + arguments -> identical files, whatever --workers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import sys
import zipfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from PIL import Image, ImageOps

from dlbench.dataprep.files import sha256_file

SKIMAGE = "scikit_image"
TFDS = "tensorflow_datasets"
LABELS_IN_TFDS = "tensorflow_datasets/datasets/imagenet2012/labels.txt"
# Photographs in skimage/data (drawings, charts and tiny test patterns left out).
COLOR_PHOTOS = [
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "hubble_deep_field.jpg",
    "retina.jpg",
    "rocket.jpg",
    "ihc.png",
]
GRAY_PHOTOS = ["camera.png", "brick.png", "grass.png", "gravel.png", "moon.png", "coins.png", "cell.png"]
PHOTOS = COLOR_PHOTOS + GRAY_PHOTOS  # --photo-per-class: class i is cut from PHOTOS[i]
# Imagenette's ten synsets first (their WordNet names are known here); more classes are taken evenly spaced
# from labels.txt and named after their synset id.
NAMES = {
    "n01440764": "tench, Tinca tinca",
    "n02102040": "English springer, English springer spaniel",
    "n02979186": "cassette player",
    "n03000684": "chain saw, chainsaw",
    "n03028079": "church, church building",
    "n03394916": "French horn, horn",
    "n03417042": "garbage truck, dustcart",
    "n03425413": "gas pump, gasoline pump, petrol pump, island dispenser",
    "n03445777": "golf ball",
    "n03888257": "parachute, chute",
}


class SampleError(Exception):
    """Bad input (a missing wheel, a wheel without the expected files, impossible counts)."""


def find_wheel(paths: Sequence[Path], prefix: str) -> Path:
    """The wheel whose file name starts with `prefix-`, among files and directories given."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(path.glob(f"{prefix}-*.whl"))
        elif path.name.startswith(f"{prefix}-") and path.suffix == ".whl":
            found.append(path)
    if not found:
        raise SampleError(
            f"no {prefix}-*.whl among {', '.join(map(str, paths))} "
            f"(pip download --no-deps {prefix.replace('_', '-')}==VERSION -d DIR)"
        )
    return found[-1]


def load_inputs(wheels: Sequence[Path]) -> tuple[dict[str, bytes], list[str], dict]:
    """(photo name -> file bytes, the 1,000 synsets, provenance)."""
    ski, tfds = find_wheel(wheels, SKIMAGE), find_wheel(wheels, TFDS)
    photos = {}
    try:
        with zipfile.ZipFile(ski) as z:
            for name in COLOR_PHOTOS + GRAY_PHOTOS:
                photos[name] = z.read(f"skimage/data/{name}")
        with zipfile.ZipFile(tfds) as z:
            synsets = z.read(LABELS_IN_TFDS).decode().split()
    except KeyError as exc:
        raise SampleError(f"a file is missing from the wheel: {exc}") from None
    except zipfile.BadZipFile as exc:
        raise SampleError(f"not a readable wheel: {exc}") from None
    if len(synsets) != 1000 or synsets != sorted(synsets):
        raise SampleError(f"{tfds}: {LABELS_IN_TFDS} should hold 1,000 sorted synsets, has {len(synsets)}")
    provenance = {"wheels": {p.name: sha256_file(p) for p in (ski, tfds)}, "synsets_from": LABELS_IN_TFDS}
    return photos, synsets, provenance


def choose_synsets(all_synsets: list[str], classes: int) -> list[str]:
    chosen = [s for s in NAMES if s in all_synsets][:classes]
    rest = [s for s in all_synsets if s not in chosen]
    step = len(rest) / max(1, classes - len(chosen))
    chosen += [rest[int(i * step)] for i in range(classes - len(chosen))]
    return sorted(chosen)


# ----------------------------------------------------------------------------- making one image
_PHOTOS: dict[str, Image.Image] = {}


def _photo(name: str, data: bytes) -> Image.Image:
    if name not in _PHOTOS:
        image = Image.open(io.BytesIO(data))
        _PHOTOS[name] = image.convert("L" if name in GRAY_PHOTOS else "RGB")
    return _PHOTOS[name]


def make_image(job: tuple, photos: dict[str, bytes]) -> bytes:
    """The bytes of one file: job = (rng seed, kind 'jpeg'|'gray'|'png'|'cmyk', long side range, quality range[,
    the class's photo])."""
    seed, kind, (lo, hi), (qlo, qhi), *class_photo = job
    rng = random.Random(seed)
    name = rng.choice(GRAY_PHOTOS if kind == "gray" else COLOR_PHOTOS)
    if class_photo:  # --photo-per-class: the class's own photo (grey when the file is to be grey)
        name = class_photo[0]
    image = _photo(name, photos[name])
    if kind == "gray" and image.mode != "L":
        image = image.convert("L")
    width, height = image.size
    area = rng.uniform(0.3, 1.0) * width * height
    aspect = rng.uniform(3 / 4, 4 / 3)
    w, h = min(width, int((area * aspect) ** 0.5)), min(height, int((area / aspect) ** 0.5))
    x, y = rng.randint(0, width - w), rng.randint(0, height - h)
    crop = image.crop((x, y, x + w, y + h))
    if rng.random() < 0.5:
        crop = ImageOps.mirror(crop)
    scale = rng.randint(lo, hi) / max(w, h)
    crop = crop.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BICUBIC)
    gain = rng.uniform(0.85, 1.15)
    crop = crop.point(lambda v: min(255, int(v * gain)))
    out = io.BytesIO()
    if kind == "png":
        crop.save(out, "PNG")
    elif kind == "cmyk":
        crop.convert("CMYK").save(out, "JPEG", quality=rng.randint(qlo, qhi))
    else:
        crop.save(out, "JPEG", quality=rng.randint(qlo, qhi))
    return out.getvalue()


_WORK: dict = {}


def _make_batch(batch: list[tuple[str, tuple]]) -> int:
    photos = _WORK["photos"]
    for path, job in batch:
        Path(path).write_bytes(make_image(job, photos))
    return len(batch)


def _boxes(rng: random.Random) -> list[tuple[float, float, float, float]]:
    boxes = []
    for _ in range(rng.choice((1, 1, 1, 2))):
        xmin, ymin = rng.uniform(0, 0.5), rng.uniform(0, 0.5)
        boxes.append((xmin, ymin, rng.uniform(xmin + 0.2, 1.0), rng.uniform(ymin + 0.2, 1.0)))
    return boxes


def build(
    wheels: Sequence[Path],
    out: Path,
    classes: int = 10,
    train_per_class: int = 30,
    validation_per_class: int = 5,
    png: int = 1,
    cmyk: int = 1,
    gray: int | None = None,
    validation_layout: str = "flat",
    seed: int = 0,
    long_side: tuple[int, int] = (480, 640),
    quality: tuple[int, int] = (94, 98),
    bbox_fraction: float = 0.5,
    workers: int | None = None,
    photo_per_class: bool = False,
) -> dict:
    """Write the tree to `out` (replacing it once complete); returns sample.json's content."""
    if not 1 <= classes <= 1000:
        raise SampleError(f"--classes must be 1..1000, got {classes}")
    if train_per_class < 1 or validation_per_class < 0:
        raise SampleError("--train-per-class must be >= 1 and --validation-per-class >= 0")
    if gray is None:  # about 5% grayscale photos, at least one
        gray = max(1, round(0.05 * classes * train_per_class))
    if png + cmyk + gray > classes * train_per_class:
        raise SampleError(
            f"--png {png} + --cmyk {cmyk} + --gray {gray} exceed the {classes * train_per_class} training images"
        )
    if not (0 < long_side[0] <= long_side[1] and 1 <= quality[0] <= quality[1] <= 100):
        raise SampleError("--long-side needs 0 < MIN <= MAX and --quality 1 <= MIN <= MAX <= 100")
    if photo_per_class and classes > len(PHOTOS):
        raise SampleError(f"--photo-per-class: at most {len(PHOTOS)} classes (one photo each), got {classes}")
    photos, all_synsets, provenance = load_inputs(wheels)
    synsets = choose_synsets(all_synsets, classes)
    # With photo_per_class the label says which photo an image was cut from (learnable: time to quality);
    # without, every image comes from a photo drawn at random (labels carry no signal: throughput only).
    extra = {wnid: (PHOTOS[i],) for i, wnid in enumerate(synsets)} if photo_per_class else {}
    rng = random.Random(seed)

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "train").mkdir(parents=True)
    (tmp / "validation").mkdir()
    jobs: list[tuple[str, tuple]] = []
    boxes: list[str] = []
    sizes = (long_side, quality)

    # training images; the odd ones (PNG named .JPEG, CMYK, grayscale) at random positions, as in the real set
    train = [(wnid, n) for wnid in synsets for n in range(1, train_per_class + 1)]
    odd = rng.sample(range(len(train)), png + cmyk + gray)
    kinds = (
        {i: "png" for i in odd[:png]}
        | {i: "cmyk" for i in odd[png : png + cmyk]}
        | {i: "gray" for i in odd[png + cmyk :]}
    )
    special: dict[str, list[str]] = {"png": [], "cmyk": [], "gray": []}
    for i, (wnid, n) in enumerate(train):
        (tmp / "train" / wnid).mkdir(exist_ok=True)
        name = f"{wnid}_{n}.JPEG"
        kind = kinds.get(i, "jpeg")
        if kind != "jpeg":
            special[kind].append(f"train/{wnid}/{name}")
        jobs.append((str(tmp / "train" / wnid / name), (rng.getrandbits(64), kind) + sizes + extra.get(wnid, ())))
        if rng.random() < bbox_fraction:
            boxes += [f"{name},{a:.4f},{b:.4f},{c:.4f},{d:.4f}" for a, b, c, d in _boxes(rng)]

    # validation images: numbered in a shuffled class order, as ILSVRC2012_val_* are
    val = [wnid for wnid in synsets for _ in range(validation_per_class)]
    rng.shuffle(val)
    for number, wnid in enumerate(val, 1):
        name = f"ILSVRC2012_val_{number:08d}.JPEG"
        folder = tmp / "validation" / (wnid if validation_layout == "folders" else "")
        folder.mkdir(exist_ok=True)
        jobs.append((str(folder / name), (rng.getrandbits(64), "jpeg") + sizes + extra.get(wnid, ())))
        boxes += [f"{name},{a:.4f},{b:.4f},{c:.4f},{d:.4f}" for a, b, c, d in _boxes(rng)]
    if validation_layout == "flat":
        (tmp / "validation_labels.txt").write_text("".join(f"{w}\n" for w in val))

    workers = max(1, workers or len(os.sched_getaffinity(0)))
    _WORK["photos"] = photos
    batches = [jobs[i : i + 64] for i in range(0, len(jobs), 64)]
    if workers == 1 or len(batches) == 1:
        for batch in batches:
            _make_batch(batch)
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            list(pool.map(_make_batch, batches))

    (tmp / "synsets.txt").write_text("".join(f"{s}\n" for s in all_synsets))
    (tmp / "metadata.txt").write_text("".join(f"{s}\t{NAMES.get(s, s)}\n" for s in synsets))
    (tmp / "bounding_boxes.csv").write_text("".join(f"{line}\n" for line in boxes))
    total = sum(p.stat().st_size for p in (tmp / "train").rglob("*.JPEG")) + sum(
        p.stat().st_size for p in (tmp / "validation").rglob("*.JPEG")
    )
    info = {
        **provenance,
        "seed": seed,
        "synsets": synsets,
        "train_images": len(train),
        "validation_images": len(val),
        "validation_layout": validation_layout,
        "png_named_jpeg": special["png"],
        "cmyk_jpeg": special["cmyk"],
        "grayscale_jpeg": special["gray"],
        "bounding_boxes": len(boxes),
        "image_bytes": total,
        "long_side": list(long_side),
        "quality": list(quality),
        **({"photo_per_class": {wnid: photo[0] for wnid, photo in extra.items()}} if photo_per_class else {}),
    }
    (tmp / "sample.json").write_text(json.dumps(info, indent=1) + "\n")
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlbench.dataprep.sample_imagenet",
        description="Build a small ImageNet-layout tree from the photos in "
        "scikit-image's wheel and the synsets in tensorflow-datasets'.",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        nargs="+",
        required=True,
        help="directory holding the downloaded wheels, or the two .whl files",
    )
    parser.add_argument("--out", type=Path, required=True, help="tree to create (replaced once complete)")
    parser.add_argument("--classes", type=int, default=10, help="synsets with images (default 10)")
    parser.add_argument("--train-per-class", type=int, default=30)
    parser.add_argument("--validation-per-class", type=int, default=5)
    parser.add_argument("--png", type=int, default=1, help="training files holding PNG data under a .JPEG name")
    parser.add_argument("--cmyk", type=int, default=1, help="training files that are CMYK JPEGs")
    parser.add_argument(
        "--gray", type=int, default=None, help="training files that are grayscale JPEGs (default: 5%%, at least 1)"
    )
    parser.add_argument("--validation-layout", choices=("flat", "folders"), default="flat")
    parser.add_argument(
        "--long-side",
        type=int,
        nargs=2,
        default=(480, 640),
        metavar=("MIN", "MAX"),
        help="pixels of the longer side (default 480 640: ~109 kB per image, as ImageNet)",
    )
    parser.add_argument("--quality", type=int, nargs=2, default=(94, 98), metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--photo-per-class",
        action="store_true",
        help="cut each class from its own photo, so labels are learnable (time-to-quality studies); "
        "default: a random photo per image (labels carry no signal)",
    )
    parser.add_argument("--workers", type=int, default=None, help="processes (default: usable cores)")
    args = parser.parse_args(argv)
    try:
        info = build(
            args.wheels,
            args.out,
            args.classes,
            args.train_per_class,
            args.validation_per_class,
            args.png,
            args.cmyk,
            args.gray,
            args.validation_layout,
            args.seed,
            tuple(args.long_side),
            tuple(args.quality),
            workers=args.workers,
            photo_per_class=args.photo_per_class,
        )
    except (SampleError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"{args.out}: {info['train_images']} training + {info['validation_images']} validation images "
        f"({info['image_bytes'] / 1e6:.1f} MB) in {len(info['synsets'])} classes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
