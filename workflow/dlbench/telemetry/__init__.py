"""What the hardware did during a run: the sampler (a separate process, core environment) and the summary of
its samples over a run's warm-up and measured windows (dlbench.logformats.runlogs reads it into the record)."""
