"""The cluster launch recipes of docs/parallel.md, checked as far as this machine can
without a Slurm or Kubernetes cluster: the Slurm script passes `bash -n`, and the
command it derives from fake SLURM_* values (the rendezvous on the job's first host,
--devices from the node count) is one torchrun and torch_script.py accept; the Kubeflow
manifests parse as YAML, hold the fields the training operator needs (its API, kind,
replica specs, container names) and run this project's commands with flags that parse
and agree with the replica counts."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from algorithms.paths import REPO_ROOT
from algorithms.config.run_config import parse_config

SLURM_SCRIPT = os.path.join(REPO_ROOT, "scripts", "slurm_torchrun.sh")
MANIFESTS = os.path.join(REPO_ROOT, "scripts", "kubernetes")
CLEAN_PATH = "/usr/bin:/bin"  # no scontrol: the script's own host-list expansion runs


def slurm_command(nodelist: str, nodes: int, *flags, **env) -> list:
    proc = subprocess.run(
        ["bash", SLURM_SCRIPT, *flags],
        env={"PATH": CLEAN_PATH, "SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_NUM_NODES": str(nodes), "DRY_RUN": "1"}
        | {"SLURM_JOB_ID": "77", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def torchrun_and_script(words: list) -> tuple:
    """(torchrun's parsed args, the script's RunConfig) of `python -m torch_wrapper.agent ...`."""
    from torch.distributed.run import parse_args

    agent = words.index("torch_wrapper.agent")
    script = next(i for i, word in enumerate(words) if word.endswith("_script.py"))
    return parse_args(words[agent + 1 :]), parse_config(words[script + 1 :], "t", "t")


def test_the_slurm_script_is_valid_bash():
    proc = subprocess.run(["bash", "-n", SLURM_SCRIPT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "nodelist, first",
    [("node[07-09,12],gpu1", "node07"), ("gpu5", "gpu5"), ("a1,b[1-2]", "a1"), ("n[3]", "n3"), ("c[010-011]", "c010")],
)
def test_the_slurm_script_puts_the_rendezvous_on_the_first_host(nodelist, first):
    words = slurm_command(nodelist, 2)
    args, _ = torchrun_and_script(words)
    assert args.rdzv_endpoint == f"{first}:29400"


def test_the_slurm_script_derives_a_command_torchrun_and_the_script_accept():
    words = slurm_command("node[1-4]", 4, "--num_epochs", "3", RANKS_PER_NODE="2", RDZV_PORT="29500")
    assert words[:4] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", ".venv/bin/python"]
    args, config = torchrun_and_script(words)
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("4", "2", "c10d")
    assert (args.rdzv_endpoint, args.rdzv_id) == ("node1:29500", "slurm-77")
    assert (config.plan.strategy, config.plan.devices, config.num_epochs) == ("data", 8, 3)


def test_the_slurm_script_outside_a_job_is_one_line():
    proc = subprocess.run(["bash", SLURM_SCRIPT], env={"PATH": CLEAN_PATH}, capture_output=True, text=True)
    assert proc.returncode != 0
    assert proc.stderr.strip().endswith("run this under sbatch or salloc (SLURM_JOB_NUM_NODES is not set)")


def manifests(name: str) -> list:
    """The YAML documents of a manifest, parsed by PyYAML."""
    import yaml

    with open(os.path.join(MANIFESTS, name)) as handle:
        return list(yaml.safe_load_all(handle))


def containers(replica_spec: dict) -> list:
    return replica_spec["template"]["spec"]["containers"]


def test_the_pytorchjob_runs_one_agent_per_pod_with_the_rendezvous_on_the_master():
    (job,) = manifests("pytorchjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"} and specs["Master"]["replicas"] == 1
    pods = sum(spec["replicas"] for spec in specs.values())
    for spec in specs.values():
        (container,) = containers(spec)
        assert container["name"] == "pytorch"  # the operator finds its container by this name
        assert container["command"] == ["/bin/sh", "-c"]
        words = shlex.split(container["args"][0].replace("$MASTER_ADDR:$MASTER_PORT", "master:23456"))
        assert words[:3] == ["exec", ".venv/bin/python", "-m"]
        args, config = torchrun_and_script(words)
        assert (args.nnodes, args.rdzv_backend, args.rdzv_endpoint) == (str(pods), "c10d", "master:23456")
        assert config.plan.devices == pods * int(args.nproc_per_node)
        assert container["image"] == containers(specs["Master"])[0]["image"]


def test_the_tfjobs_run_the_script_with_devices_equal_to_the_workers():
    data, ps = manifests("tfjob.yaml")
    for job in (data, ps):
        assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert set(data["spec"]["tfReplicaSpecs"]) == {"Worker"}
    assert set(ps["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker", "PS"}
    for job, strategy in ((data, "data"), (ps, "ps")):
        specs = job["spec"]["tfReplicaSpecs"]
        for spec in specs.values():
            (container,) = containers(spec)
            assert container["name"] == "tensorflow"  # the operator finds its container by this name
            assert container["command"] == [".venv/bin/python", "tensorflow_script.py"]
            config = parse_config(container["args"], "t", "t")
            assert (config.plan.strategy, config.plan.devices) == (strategy, specs["Worker"]["replicas"])
            if strategy == "ps":
                assert config.ps_tasks == specs["PS"]["replicas"]
