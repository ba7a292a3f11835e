# Read before Snakemake's `configfile:` loads config.yaml: a YAML mistake there is reported with its file,
# line and column (dlbench.configfile), not as "Config file is not valid JSON or YAML".
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir, "workflow")))

from dlbench.configfile import StudyFile, StudyFileError  # noqa: E402

DEFAULT_CONFIGFILE = "config.yaml"
if Path(DEFAULT_CONFIGFILE).exists():
    try:
        StudyFile(DEFAULT_CONFIGFILE)
    except StudyFileError as error:
        sys.exit(f"dlbench: invalid configuration:\n  {error}")
