# batch_size max: one search per configuration without its batch size (and nodes), a checkpoint. Its result
# names the size found; the runs at that size are ordinary runs (benchmark.smk), added by study_run_logs.


checkpoint batch_search:
    input:
        env=run_env_input,
        data=dataset_ready,
    output:
        SEARCH_PATTERN,
    log:
        "logs/search/{model}/{framework}/{topology}/{variant}.log",
    wildcard_constraints:
        **(RUN_WILDCARDS | {"variant": "bsmax-[A-Za-z0-9_.-]+"}),
    conda:
        run_conda_env
    container:
        RUN_CONTAINER
    # Probes measure memory, not time, but they would disturb a timed run: the whole machine, like one.
    threads: ALL_CORES
    resources:
        timed_run=1,
        runtime=lambda wildcards: SEARCH_PROBES * int(configuration(wildcards).timeout_minutes) + RUNTIME_MARGIN_MINUTES,
        nodes=1,
        tasks=lambda wildcards: configuration(wildcards).devices_per_node,
        cpus_per_task=lambda wildcards, threads: max(1, threads // configuration(wildcards).devices_per_node),
        mpi=lambda wildcards: "srun" if configuration(wildcards).devices_per_node > 1 else "",
        gres=lambda wildcards: gpu_gres(configuration(wildcards)),
        slurm_extra="--exclusive --no-requeue",  # as benchmark_run
    params:
        run=run_words("dlbench.harness.batchsearch"),
        args=search_arguments,
    shell:
        "{params.run} {params.args} --cpus {threads} --out {output} > {log} 2>&1"
