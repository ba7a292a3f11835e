"""The ResNet models' shared definition (standard library only): every backend's resnet.py and flops.py build
from it, so the frameworks cannot disagree.

resnet50: ResNet-50 v1.5 (25,557,032 parameters with 1000 classes). resnet_tiny: the same v1.5 bottleneck
network with one block per stage and a quarter of the widths (16-channel stem), for convergence studies on a
CPU (time to quality on the sample data in minutes); not a published model.
"""

from __future__ import annotations

# (bottleneck width, blocks, stride of the first block) per stage; the stem's channels
STAGES = {
    "resnet50": ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)),
    "resnet_tiny": ((16, 1, 1), (32, 1, 2), (64, 1, 2), (128, 1, 2)),
}
STEM = {"resnet50": 64, "resnet_tiny": 16}
MODELS = tuple(STAGES)
