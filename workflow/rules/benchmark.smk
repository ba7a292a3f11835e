# One benchmark run = one job: a configuration and a repeat number. Under the SLURM profile it is one
# SLURM job on exclusive nodes whose shape comes from the topology (its resources below; gpu_gres in
# dlbench.plan.plan).


rule benchmark_run:
    input:
        env=run_env_input,
        data=dataset_ready,
    output:
        RUN_LOG_PATTERN,
    log:
        "logs/runs/{model}/{framework}/{topology}/{variant}/rep{repeat}.log",
    wildcard_constraints:
        **RUN_WILDCARDS,
    conda:
        run_conda_env
    container:
        RUN_CONTAINER
    # A timed run gets the whole machine: all cores, and the global `timed_run` resource
    # (profiles/default sets timed_run=1) so two timed runs never overlap. Under SLURM the profile's
    # set-threads gives the cores per node, shared by the run's tasks.
    threads: ALL_CORES
    resources:
        timed_run=1,
        runtime=lambda wildcards: int(configuration(wildcards).timeout_minutes) + RUNTIME_MARGIN_MINUTES,
        nodes=lambda wildcards: configuration(wildcards).nodes,
        tasks=lambda wildcards: configuration(wildcards).world_size,
        cpus_per_task=lambda wildcards, threads: max(1, threads // configuration(wildcards).devices_per_node),
        mpi=lambda wildcards: "srun" if configuration(wildcards).world_size > 1 else "",
        gres=lambda wildcards: gpu_gres(configuration(wildcards)),
        # --no-requeue: SLURM would put a job whose node failed back in the queue as the same try, behind
        # Snakemake's back (and a two-node job waits there until the node returns); the try fails instead and
        # Snakemake's retries decide, each try noted (harness: Attempts).
        # A sweep's run is pinned to its node (or group of nodes): --nodelist.
        slurm_extra=slurm_extra,
        # Not parameters: retrying must not change what the run is (and trigger reruns).
        attempt=lambda wildcards, attempt: attempt,
        max_attempts=max_attempts,
    params:
        run=run_words("dlbench.harness"),
        args=run_arguments,
    shell:
        "{params.run} {params.args} --cpus {threads}"
        " --attempt {resources.attempt} --max-attempts {resources.max_attempts} --log {output} > {log} 2>&1"


# Time to quality: the MLPerf log of a run (MLPerf's own format, for its tools), from the dlbench log.
rule mlperf_log:
    input:
        run=RUN_LOG_PATTERN,
    output:
        mlperf=MLPERF_LOG_PATTERN,
    log:
        "logs/runs/{model}/{framework}/{topology}/{variant}/rep{repeat}.mlperf.log",
    wildcard_constraints:
        **RUN_WILDCARDS,
    localrule: True
    conda:
        "../../envs/core.yaml"
    script:
        "../scripts/mlperf_log.py"


# MFU on a CPU (platform.cpu_peak: measure): the fp32 and bf16 GEMM peaks of a framework's library on the machine
# the runs use (dlbench.harness.peak), in its default build. Like a timed run it has the whole machine, never beside
# one (timed_run), and under SLURM a node to itself; it waits for a quiet machine and otherwise records no figure,
# saying why.
rule cpu_peak:
    input:
        env=run_env_input,
    output:
        CPU_PEAK_PATTERN,
    log:
        "logs/cpu_peak/{framework}.log",
    conda:
        run_conda_env
    container:
        RUN_CONTAINER
    threads: ALL_CORES
    resources:
        timed_run=1,
        runtime=15,
        nodes=1,
        tasks=1,
        cpus_per_task=lambda wildcards, threads: threads,
        slurm_extra="--exclusive",
    params:
        run=run_words("dlbench.harness.peak"),
    shell:
        "{params.run} --library {wildcards.framework} --out {output} > {log} 2>&1"
