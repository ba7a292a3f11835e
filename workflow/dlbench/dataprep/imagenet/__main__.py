"""python -m dlbench.dataprep.imagenet: the converter's command line (cli.py)."""

import sys

from .cli import main

sys.exit(main())
