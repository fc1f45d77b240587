"""Flags taken out of an argv before it goes to a child process (algorithms/config/argv.py):
both spellings of a valued flag with its value, a switch alone, and what was taken
kept in order even where a value repeats one that stays."""

from algorithms.config.argv import split_flags, without_flags


def test_trials_drop_the_budget_flag_with_its_value():
    argv = ["--batch_size", "auto", "--memory_budget_mb", "500", "--seed", "1", "--memory_budget_mb=7"]
    assert without_flags(argv, "--memory_budget_mb") == ["--batch_size", "auto", "--seed", "1"]


def test_a_switch_goes_alone_and_a_valued_flag_takes_its_value():
    argv = ["--ps_sync", "--quiet", "--sync_every", "4", "--lr", "0.1", "--sync_every=8", "--quiet=1"]
    assert without_flags(argv, ["--sync_every"], ["--ps_sync", "--quiet"]) == ["--lr", "0.1"]
    # a switch named as valued would swallow the next flag: the caller says which is which
    assert without_flags(["--ps_sync", "--lr", "0.1"], bare="--ps_sync") == ["--lr", "0.1"]
    assert without_flags(["--ps_sync", "--lr", "0.1"], valued="--ps_sync") == ["0.1"]


def test_a_flag_that_only_shares_a_prefix_stays():
    argv = ["--run", "x", "--run_id", "a", "--run_idx=3", "--run_id=b"]
    assert without_flags(argv, "--run_id") == ["--run", "x", "--run_idx=3"]


def test_split_returns_what_it_took_in_order_even_when_a_value_repeats_a_kept_one():
    argv = ["--threads", "2", "--strategy", "async", "--devices", "2", "--ps_sync", "--seed", "async"]
    kept, taken = split_flags(argv, ("--strategy", "--devices"), ("--ps_sync",))
    assert kept == ["--threads", "2", "--seed", "async"]
    assert taken == ["--strategy", "async", "--devices", "2", "--ps_sync"]
