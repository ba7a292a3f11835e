# One benchmark run = one job: a configuration and a repeat number.


rule benchmark_run:
    input:
        env=lambda wildcards: [] if USE_CONDA else env_marker(wildcards.framework),
    output:
        "results/runs/{model}/{framework}/{topology}/{variant}/rep{repeat}.jsonl",
    log:
        "logs/runs/{model}/{framework}/{topology}/{variant}/rep{repeat}.log",
    wildcard_constraints:
        model="[a-z0-9_]+",
        framework="[a-z]+",
        topology="[0-9]+x[0-9]+",
        variant="[A-Za-z0-9_.-]+",
        repeat="[0-9]+",
    params:
        python=lambda wildcards: framework_python(wildcards.framework),
        args=run_arguments,
        package_dir=PACKAGE_DIR,
    # A timed run gets the whole machine: all cores, and the global `timed_run` resource
    # (profiles/default sets timed_run=1) so two timed runs never overlap.
    threads: workflow.cores
    resources:
        timed_run=1,
        runtime=lambda wildcards: int(configuration(wildcards).timeout_minutes) + 5,
    conda:
        "../../envs/{framework}.yaml"
    shell:
        "PYTHONPATH={params.package_dir} {params.python} -m dlbench.harness {params.args} --cpus {threads} --log {output} > {log} 2>&1"
