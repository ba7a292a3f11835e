"""Collecting and aggregating results: logs become records, records a summary (core environment, the jobs after
the runs).

    records          the run record, one row of records.csv, whatever log format it came from
    mlperf_writer    the MLPerf log of a time-to-quality run (rule mlperf_log)
    aggregate        per configuration: median and dispersion, speedup, scaling efficiency, MFU
    stats            intervals, steady state, comparison tests and plausibility flags on records
    references       published figures matched to a summary
    compare          two result sets compared, configuration by configuration (`python -m
                     dlbench.collect.compare A B`)
    builds           the software builds of one set compared, configuration by configuration, and what differs
    history          a study's configurations across its published versions, each against the newest earlier one
    fleet            a sweep's nodes, each against the rest of the fleet: ratio, interval, verdict, hardware
    expectations     the figures a study expects, judged pass, fail or cannot be judged (a published report
                     judged again: `python -m dlbench.judge <report>`, the acceptance test's exit status)

Existing logs read as records beside the study's own runs (rule import_logs) are dlbench.imports, at the
package's top. It reads the shared vocabulary (dlbench.vocabulary), the log formats and the harness's
definitions; nothing of dlbench.plan or dlbench.report (tests/test_architecture.py).
"""
