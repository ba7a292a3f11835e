"""ImageNet raw tree -> TFRecord shards in the schema of tensorflow/models `build_imagenet_data.py`.

    python -m dlbench.dataprep.imagenet convert --train-dir T --validation-dir V --synsets FILE --out DIR ...
    python -m dlbench.dataprep.imagenet verify DIR

Input: `train/<wnid>/*.JPEG`; validation either in per-synset folders or flat with `--validation-labels`
(one wnid per line in file-name order, as ILSVRC's ground truth, or `<file>[,| |\\t]<wnid>...` lines such as
LOC_val_solution.csv); the synset list (labels 1..N in sorted-synset order, 0 = background); optional
metadata (`<wnid>\\t<name>` -> image/class/text) and bounding boxes (`<file>,<xmin>,<ymin>,<xmax>,<ymax>`,
normalised, several lines per file allowed).

Output in DIR:
    train-00000-of-01024 ...  validation-00000-of-00128 ...   (no extension: `train-*` matches only shards)
    dali_index/<shard>.idx      DALI tfrecord2idx lines `<offset> <record bytes>`
    manifest.json               per shard records / per-class counts / bytes / sha256, totals, inputs, seed,
                                re-encoded and skipped images (with the reason)
    recordio/{train,validation}.{rec,idx}   with --recordio: MXNet RecordIO, 0-based labels, id = position
                                in the shuffled list (so ids have gaps where images were skipped)

Records hold the reference's keys. JPEG bytes are copied exactly (grayscale ones too, as the reference does);
the image size comes from the JPEG frame header (read here; Pillow's lazy open for anything unusual), not a
decode. Files that are not JPEG (the
PNG named .JPEG in real ImageNet) and CMYK JPEGs (22 in real ImageNet) are re-encoded as RGB JPEG at
quality 100, as the reference's coder does -- found by their content, not a list of names. An unreadable,
empty, non-image or truncated file (a JPEG without its end-of-image marker that Pillow cannot decode) is
skipped and listed in the manifest; the run goes on.

Order: each split's file list (synsets sorted, files sorted) shuffled with random.Random(seed) -- the
reference's `random.seed(12345); random.shuffle(...)` for the default seed -- then cut into equal contiguous
shards. A shard is one task for the worker processes, so outputs do not depend on --workers. Shards are
written under a temporary name and renamed when complete; the manifest is written last.

The converter's jobs, one module each: inputs.py (the raw tree and its lists), images.py (one image as the
records hold it), examples.py (the Example encoding), shards.py (writing shards and the manifest: convert),
verify.py (checking a converted directory), cli.py (the command line).
"""

from .cli import main
from .examples import class_entries, encode_example, example_head
from .images import BadImage, jpeg_header, prepare_image
from .inputs import SPLITS, InputError, Split, read_synsets, scan_flat, scan_folders, shuffle
from .shards import MANIFEST, convert
from .verify import verify

__all__ = [
    "MANIFEST",
    "SPLITS",
    "BadImage",
    "InputError",
    "Split",
    "class_entries",
    "convert",
    "encode_example",
    "example_head",
    "jpeg_header",
    "main",
    "prepare_image",
    "read_synsets",
    "scan_flat",
    "scan_folders",
    "shuffle",
    "verify",
]
