# Read before Snakemake's `configfile:` loads config.yaml: a YAML mistake there is reported with its file,
# line and column (dlbench.plan.configfile), not as "Config file is not valid JSON or YAML".
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir, "workflow")))

from dlbench.plan import session  # noqa: E402

DEFAULT_CONFIGFILE = "config.yaml"
session.check_default_configfile(DEFAULT_CONFIGFILE)
