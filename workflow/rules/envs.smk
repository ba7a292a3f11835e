# Framework environments built offline as uv virtualenvs, keyed by a hash of envs/<name>.yaml.
# Not needed with --sdm conda, where Snakemake builds envs/<name>.yaml itself.


rule build_framework_env:
    output:
        marker=f"{VENV_DIR}/{{env}}-{{spec_hash}}/{MARKER}",
    log:
        "logs/envs/{env}-{spec_hash}.log",
    wildcard_constraints:
        env="[a-z0-9_]+",
        spec_hash="[0-9a-f]{12}",
    localrule: True
    conda:
        "../../envs/core.yaml"
    params:
        spec=lambda wildcards: ShellWord(env_spec(wildcards.env)),
        find_links=(
            ",".join(SETTINGS["software"]["find_links"])
            if isinstance(SETTINGS["software"]["find_links"], list)
            else SETTINGS["software"]["find_links"]
        ),
        # in '...' below: the schema refuses a "'" in it
        run=run_module("core", "dlbench.venvs"),
        venv_dir=ShellWord(VENV_DIR),
    shell:
        "{params.run} build --spec {params.spec} --venv-dir {params.venv_dir}"
        " --find-links '{params.find_links}' > {log} 2>&1"
