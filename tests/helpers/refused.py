"""A run refused before it starts, as the tests check it: the torch entry point in this
process (torch itself never loads: every refusal comes before it), exit status 2, one line
on stderr, nothing written."""

from __future__ import annotations

from algorithms.run.entry import run_entry_point


def run_refused(tmp_path, capsys, argv: list) -> str:
    """The torch entry script on `argv`: status 2, one line on stderr, nothing written."""
    results = tmp_path / "results"
    code = run_entry_point("torch_wrapper.train", "torch_script.py", "test", argv + ["--results_dir", str(results)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not results.exists() and not (tmp_path / "results.log").exists(), "a refused run wrote results"
    return err
