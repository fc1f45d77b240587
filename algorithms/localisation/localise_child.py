"""One framework's side of the localisation, run by the framework's own Python (its venv,
its KERAS_BACKEND) from algorithms/localisation/localise.py:

    python -m algorithms.localisation.localise_child JOB_JSON

The job names the wrapper package, the network, the inputs file (.npz: each step's batch
and weights, canonical layout) and where to write. Written: REPORT_JSON (the runtime and
model_parameters, the structural check's input) first, then, unless the job is the
structural check alone, into the OUTPUTS folder each array as soon as the wrapper gives
it (output_STEP_LAYER.npy as each layer's output comes, gradient_STEP_LAYER_ROLE.npy
after the backward pass, in the spec's layout) and step_STEP.json when a step is done
(the loss and the parameters with no gradient) or has failed (the error, in one line).
So a process that dies leaves every array it had, and the parent reports them. Each file
appears whole (written aside, then renamed). The arrays travel as .npy, which numpy 1
(the legacy env) and 2 both read."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from dataclasses import asdict

import numpy as np

from algorithms.errors import EXIT_FAILED
from algorithms.network.networks import network_for_data
from algorithms.network.variants import DIE_EXIT_STATUS, Fault, apply_fault
from algorithms.network.weights import LayerWeights


def step_weights(inputs, network, step: int) -> list:
    def running(name, index):
        key = f"{name}_{step}_{index}"
        return inputs[key] if key in inputs.files else None

    return [
        LayerWeights(
            index,
            inputs[f"kernel_{step}_{index}"],
            inputs[f"bias_{step}_{index}"],
            running("running_mean", index),
            running("running_var", index),
        )
        for index, _, _ in network.parametric_layers()
    ]


def write_whole(path: str, write) -> None:
    """`write(handle)` into a file beside `path`, then renamed to it: a reader never sees half a file."""
    aside = path + ".part"
    with open(aside, "wb") as handle:
        write(handle)
    os.replace(aside, path)


def save_array(folder: str, name: str, value) -> None:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name}: {array.dtype} is not an array of numbers")
    write_whole(os.path.join(folder, name + ".npy"), lambda handle: np.save(handle, array))


def save_json(path: str, record: dict) -> None:
    write_whole(path, lambda handle: handle.write(json.dumps(record).encode()))


def one_line(error: BaseException) -> str:
    """An exception as its traceback's last line: `RuntimeError: mat1 and mat2 shapes ...`."""
    return traceback.format_exception_only(type(error), error)[-1].strip()


def run_step(probes, network, fault, fault_text: str, inputs, step: int, folder: str) -> None:
    """One step's probe, each output saved as the wrapper hands it over; the gradients and
    the step's record after. `--fault die:LAYER` ends the process after layer LAYER's output
    (or the first output the framework holds after it), as a crashing framework would."""

    def on_output(index: int, value) -> None:
        save_array(folder, f"output_{step}_{index}", value)
        if fault is not None and fault.kind == "die" and index >= fault.layer:
            print(f"localise_child: --fault {fault_text}: the process ends here, as a crash would", file=sys.stderr)
            sys.stderr.flush()
            os._exit(DIE_EXIT_STATUS)

    model_network, weights = network, step_weights(inputs, network, step)
    if fault is not None:
        model_network, weights = apply_fault(fault, network, weights)
    probe = probes.layer_outputs_and_gradients(
        model_network, weights, inputs[f"images_{step}"], inputs[f"labels_{step}"], on_output=on_output
    )
    for index, value in probe.outputs.items():  # each already saved, unless the wrapper gave it only here
        if not os.path.exists(os.path.join(folder, f"output_{step}_{index}.npy")):
            on_output(index, value)
    for (index, role), value in probe.gradients.items():
        if value is not None:
            save_array(folder, f"gradient_{step}_{index}_{role}", value)
    for index, value in probe.input_gradients.items():
        save_array(folder, f"input_gradient_{step}_{index}", value)
    for index, value in probe.evaluation_outputs.items():
        save_array(folder, f"evaluation_{step}_{index}", value)
    no_gradient = [[index, role] for (index, role), value in probe.gradients.items() if value is None]
    save_json(
        os.path.join(folder, f"step_{step}.json"),
        {"complete": True, "loss": float(probe.loss), "no_gradient": no_gradient},
    )


def main(job_path: str) -> int:
    with open(job_path) as handle:
        job = json.load(handle)
    runtime = importlib.import_module(f"{job['package']}.train").describe_runtime()
    probes = importlib.import_module(f"{job['package']}.probes")
    network = network_for_data(job["network"], job["train"])
    spec_fault = job.get("spec_fault")
    structure_network = apply_fault(Fault(**spec_fault), network, [])[0] if spec_fault else network
    report = {"framework": runtime.framework, "backend": runtime.backend, "versions": dict(runtime.versions)}
    try:  # a fault's model, faulted (a missing bias is the structural check's to name)
        report["parameters"] = [asdict(parameter) for parameter in probes.model_parameters(structure_network)]
    except Exception as error:
        traceback.print_exc()
        report["parameters_error"] = one_line(error)
    save_json(job["report"], report)
    if job["structure_only"]:
        return 0
    network = network.without_dropout()
    fault = Fault(**job["fault"]) if job["fault"] else None
    os.makedirs(job["outputs"], exist_ok=True)
    with np.load(job["inputs"]) as inputs:
        for step in range(1, job["steps"] + 1):
            try:
                run_step(probes, network, fault, job.get("fault_text", ""), inputs, step, job["outputs"])
            except Exception as error:  # the layers it gave are saved; the parent names the rest
                traceback.print_exc()
                save_json(os.path.join(job["outputs"], f"step_{step}.json"), {"error": one_line(error)})
                return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
