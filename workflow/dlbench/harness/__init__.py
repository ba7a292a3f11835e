"""The benchmark harness: one run of one configuration, `python -m dlbench.harness ...`.

Everything in this package runs inside a framework environment, so it imports only the standard
library, numpy and that framework (the framework only inside its backend package).

Contract shared by every framework (see docs/harness.md):
- `__main__` supervises: writes the log header, starts one process per device (locally) or the
  ranks through `srun` (SLURM), enforces the time limit, and always ends the log with a summary.
- `rank` is what each rank runs: threads and core share, warm-up, timed steps, the summary.
- `backends/<framework>/backend.py` builds model, optimizer and data and performs one training step,
  under the contract of `backends/base.py`; `frameworks.py` registers the frameworks.
"""
