"""One framework's side of the localisation, run by the framework's own Python (its venv,
its KERAS_BACKEND) from algorithms/studies/localise.py:

    python -m algorithms.studies.localise_child JOB_JSON

The job names the wrapper package, the network, the inputs file (.npz: each step's batch
and weights, canonical layout) and where to write. Written: REPORT_JSON (the runtime and
model_parameters, the structural check's input) and, unless the job is the structural
check alone, OUTPUTS_NPZ: each step's loss, layer outputs and gradients, in the spec's
layout. The arrays travel as .npz, which numpy 1 (the legacy env) and 2 both read."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import asdict

import numpy as np

from algorithms.spec.networks import get_network
from algorithms.spec.variants import Fault, apply_fault
from algorithms.spec.weights import LayerWeights


def step_weights(inputs, network, step: int) -> list:
    return [
        LayerWeights(index, inputs[f"kernel_{step}_{index}"], inputs[f"bias_{step}_{index}"])
        for index, _, _ in network.parametric_layers()
    ]


def main(job_path: str) -> None:
    with open(job_path) as handle:
        job = json.load(handle)
    train = importlib.import_module(f"{job['package']}.train")
    runtime = train.describe_runtime()
    network = get_network(job["network"])
    spec_fault = job.get("spec_fault")
    structure_network = apply_fault(Fault(**spec_fault), network, [])[0] if spec_fault else network
    report = {
        "framework": runtime.framework,
        "backend": runtime.backend,
        "versions": dict(runtime.versions),
        # a fault's model, faulted (a missing bias is the structural check's to name)
        "parameters": [asdict(parameter) for parameter in train.model_parameters(structure_network)],
    }
    if not job["structure_only"]:
        network = network.without_dropout()
        fault = Fault(**job["fault"]) if job["fault"] else None
        arrays = {}
        with np.load(job["inputs"]) as inputs:
            for step in range(1, job["steps"] + 1):
                model_network, weights = network, step_weights(inputs, network, step)
                if fault:
                    model_network, weights = apply_fault(fault, network, weights)
                probe = train.layer_outputs_and_gradients(
                    model_network, weights, inputs[f"images_{step}"], inputs[f"labels_{step}"]
                )
                arrays[f"loss_{step}"] = np.float64(probe.loss)
                arrays.update({f"output_{step}_{index}": value for index, value in probe.outputs.items()})
                arrays.update(
                    {f"gradient_{step}_{index}_{role}": value for (index, role), value in probe.gradients.items()}
                )
        np.savez(job["outputs"], **arrays)
    with open(job["report"], "w") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    main(sys.argv[1])
