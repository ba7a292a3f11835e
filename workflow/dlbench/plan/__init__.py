"""Planning a study: what the Snakemake that plans does at parse time and before any job (core environment).

    study, configfile, config_errors    the study read (each problem placed at its file and line) and expanded
    plan, data_plan                     its runs, batch-size searches and data preparation as jobs
    sweep                               a sweep's nodes (hostlists, a partition) and their SLURM states
    software, interpreters              the Python each job runs with: a study's interpreters probed (the offline
                                        framework environments: dlbench.venvs, at the package's top)
    session, stale_lock, retries,       the planning Snakemake's own steps, each called once from the Snakemake
    problems                            files: the lock, the tries of a run, what it says at its end

It reads the shared vocabulary (dlbench.vocabulary), the harness's definitions (the command line a run gets) and
dlbench.collect where a study names imports and published references; nothing of dlbench.report.
"""
