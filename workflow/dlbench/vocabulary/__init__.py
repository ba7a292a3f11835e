"""The shared vocabulary every stage imports: what a run is called, its axes, where its data lies, its device.

    identity    variants, config ids, run ids, run-log paths, the paths of prepared data and reports
    axes        the axes of a study, one declaration each
    devices     the GPU peaks MFU is held to (workflow/references/device_peaks.yaml)

The on-disk layout of prepared datasets is dlbench.layout, at the package's top (the verify rules run it).
identity and axes import only the standard library, so that the harness imports them inside the
framework environments; devices reads its table with yaml (core environment). Nothing here imports dlbench.plan,
dlbench.collect or dlbench.report (tests/test_architecture.py). This file stays empty but for its docstring:
importing any module of the package runs it, in the framework environments too.
"""
