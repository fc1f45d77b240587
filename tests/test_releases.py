"""Every run records its releases (the framework, its backend, numpy and the libraries they
compute with) in its settings record and results.log; a pair whose releases differ says so
in its verdict line, on the console and in the HTML report, and is still judged (releases
are a drift source, not a setting difference)."""

import os

import numpy as np

import pytest

from algorithms.analysis.compare import build_report, format_against_first, format_report, write_outputs
from algorithms.errors import InputError
from algorithms.records import read_settings
from algorithms.registry.release_env import constraint_lines, parse_release_set
from tests.conftest import run_script
from tests.helpers.flags import run_flags
from tests.helpers.synthetic_runs import write_run as write_synthetic_run

KERAS_OLD = {"keras": "3.14.0", "torch": "2.13.0+cpu", "numpy": "2.4.6", "oneDNN": "3.12.0"}
KERAS_NEW = {**KERAS_OLD, "keras": "3.15.1"}


def write_run(folder, *args, **settings) -> str:
    folder.mkdir(exist_ok=True)
    return write_synthetic_run(folder, *args, **settings)


def test_a_real_run_records_its_releases_in_the_settings_record_and_results_log(small_data, tmp_path):
    results = tmp_path / "results"
    log = tmp_path / "results.log"
    argv = run_flags(small_data / "train.csv", results, max_steps=2, batch_size=32, results_log=log)
    proc = run_script("torch_script.py", argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (settings,) = read_settings(str(next(results.glob("*_torch.csv")))).values()
    releases = settings["releases"]
    assert releases["torch"].startswith("2.") and releases["numpy"] == np.__version__
    assert releases["oneDNN"][0].isdigit() and releases["MKL"][0].isdigit()  # torch's CPU kernels' libraries
    assert releases["numpy BLAS"].split()[0]  # numpy's own, which the float64 evaluation multiplies with
    versions = next(line for line in log.read_text().splitlines() if line.strip().startswith("versions:"))
    assert f"torch {releases['torch']}" in versions and f"oneDNN {releases['oneDNN']}" in versions


def test_a_pair_of_two_keras_releases_names_both_in_its_verdict_and_is_still_judged(tmp_path):
    losses = np.linspace(2.3, 1.0, 20)
    old = write_run(tmp_path / "old", "keras/torch", "r", losses, 0.8, releases=KERAS_OLD)
    new = write_run(tmp_path / "new", "keras/torch", "r", losses, 0.8, releases=KERAS_NEW)
    report = build_report([f"{old}@r", f"{new}@r"], [], None)
    line = " ".join(format_against_first(report).split())
    # bit-identical losses: `same`, releases or not; the line says which releases were compared
    assert "keras 3.14.0 -> 3.15.1 (torch backend): same" in line
    assert "settings differ" not in line
    assert "keras 3.14.0 -> 3.15.1 (torch backend): same" in " ".join(format_report(report).split())
    (tmp_path / "html").mkdir()
    _, page = write_outputs(report, str(tmp_path / "html" / "pair"))
    text = open(page).read()
    assert "keras 3.14.0 -&gt; 3.15.1 (torch backend): same" in text
    assert "verdict agree" in text  # coloured by the verdict, not by the releases before it
    assert "keras 3.14.0, torch 2.13.0+cpu" in text  # the runs table: each run's releases


def test_a_pair_in_one_environment_names_no_release(tmp_path):
    """torch beside Keras on torch share torch and numpy; keras is only the second's: nothing differs."""
    losses = np.linspace(2.3, 1.0, 20)
    torch = write_run(tmp_path / "a", "torch/torch", "r", losses, 0.8, releases={"torch": "2.13.0+cpu", "numpy": "2"})
    keras = write_run(tmp_path / "b", "keras/torch", "r", losses + 1e-3, 0.8, releases=KERAS_NEW | {"numpy": "2"})
    line = format_against_first(build_report([f"{torch}@r", f"{keras}@r"], [], None))
    assert "->" not in line


def test_an_older_record_without_releases_names_none(tmp_path):
    losses = np.linspace(2.3, 1.0, 20)
    old = write_run(tmp_path / "old", "keras/torch", "r", losses, 0.8)
    new = write_run(tmp_path / "new", "keras/torch", "r", losses, 0.8, releases=KERAS_NEW)
    assert "->" not in format_against_first(build_report([f"{old}@r", f"{new}@r"], [], None))


def test_a_release_set_is_exact_pins_or_main():
    keras = parse_release_set("keras==3.14.0")
    assert (keras.key, keras.text, keras.frameworks()) == (
        "keras-3.14.0",
        "keras==3.14.0",
        ("keras_tensorflow", "keras_torch", "keras_jax"),
    )
    jax = parse_release_set("jaxlib==0.9.2, jax==0.9.2")  # sorted, commas or spaces
    assert (jax.key, jax.frameworks()) == ("jax-0.9.2+jaxlib-0.9.2", ("keras_jax",))
    assert parse_release_set("Tensorflow_CPU==2.20.0").text == "tensorflow-cpu==2.20.0"  # the registry's name
    assert parse_release_set("torch==2.12.1").frameworks() == ("keras_torch", "torch")
    assert parse_release_set("main").pins == ()
    for bad, said in (("keras>=3", "not an exact release; give NAME==VERSION"), ("keras==3.1 keras==3.2", "twice")):
        with pytest.raises(InputError, match=said):
            parse_release_set(bad)


def test_a_set_is_constrained_by_requirements_txt_less_what_it_pins():
    lines = constraint_lines(parse_release_set("jax==0.9.2"))
    assert "jaxlib==0.10.2" in lines and not any(line.startswith("jax==") for line in lines)
    assert "torch==2.13.0" in lines and any(line.startswith("numpy") for line in lines)


@pytest.mark.parametrize(
    "sets, said",
    [
        (["keras>=3", "main"], "'keras>=3' is not an exact release; give NAME==VERSION"),
        (["keras==3.14.0"], "give two release sets or more"),
        (["main", "main"], "a release set twice"),
        (["scipy==1.14.0", "main"], "no set names keras, tensorflow(-cpu), torch, jax, jaxlib or numpy; give --only"),
    ],
)
def test_run_all_refuses_bad_release_sets_in_one_line_before_building_anything(sets, said, tmp_path):
    proc = run_script("run_all.py", ["--versions", *sets, "--results_dir", str(tmp_path)])
    assert proc.returncode == 2
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert said in line
    assert not os.listdir(tmp_path)


def test_a_release_cache_that_cannot_be_written_is_one_line_with_the_fix(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache's folder would be
    proc = run_script(
        "run_all.py",
        ["--versions", "keras==3.14.0", "main", "--results_dir", str(tmp_path / "results")],
        {"CNN_PARALLEL_RELEASES": str(blocked / "releases")},
    )
    assert proc.returncode == 3
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "cannot be written there" in line and "set CNN_PARALLEL_RELEASES to a writable folder" in line
