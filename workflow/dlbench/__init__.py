"""dlbench: training-throughput benchmarks of deep-learning frameworks, as one Snakemake DAG.

`__version__` is the tool's version (CHANGELOG.md says what each version changed): every run log's header, every
record made from one, and every report name it, so a figure can be traced to the code that measured it.
Standard library only: the harness imports it in the framework environments.
"""

__version__ = "0.17.0"
