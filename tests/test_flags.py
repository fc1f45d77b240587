"""The shared flags are declared once, in algorithms/config/flags.py's table (FLAGS), and
both the parser and RunConfig are derived from it: every flag of the table is on the
parser once, in its group, hidden from --help only where the script does not run its
strategy (or an optional flag it goes with: tests/test_help.py); every flag marked
`copied` fills the RunConfig field of its name with its value as parsed (parse_config
resolves the others)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from algorithms.config.flags import FLAGS, HelpScope
from algorithms.config.parser import build_parser
from algorithms.config.run_config import RunConfig, parse_config

# command lines that between them give every copied flag a value other than its default
ARGVS = [
    [
        *("--train", "data/train.csv", "--test_labels", "labels.csv", "--seed", "7", "--max_steps", "3"),
        *("--strategy", "data", "--devices", "2", "--quiet", "--parity", "--checkpoint_every", "2"),
        *("--accumulate", "2", "--lr_scaling", "linear", "--warmup_steps", "4", "--checkpointing"),
        *("--early_stopping", "2", "--reduce_lr_on_plateau", "1", "--plateau_factor", "0.2"),
        *("--dp_impl", "dataparallel", "--threads", "1", "--malloc", "release", "--target_accuracy", "0.9"),
        *("--tuned", "--precision", "bf16", "--noise_scale", "--epoch_check"),
    ],
    [
        *("--strategy", "ps", "--devices", "3", "--batch_size", "99", "--ps_tasks", "2", "--ps_sync"),
        *("--ps_endpoint", "10.0.0.1:29500", "--remote_workers", "1", "--resume", "20261204T000000Z-abcd"),
    ],
    ["--batch_size", "auto", "--memory_budget_mb", "100", "--device", "cpu"],
    ["--step_check", "off", "--yardstick", "measure"],
]


def test_every_flag_of_the_table_is_on_the_parser_once_in_its_group():
    parser = build_parser("prog", "")
    actions = {action.dest: action for action in parser._actions}
    assert len({shared.dest for shared in FLAGS}) == len(FLAGS)
    groups = {group.title: [action.dest for action in group._group_actions] for group in parser._action_groups}
    for shared in FLAGS:
        assert actions[shared.dest].option_strings == list(shared.names), shared.names
        assert groups[shared.group].count(shared.dest) == 1, shared.names
    assert set(actions) == {shared.dest for shared in FLAGS} | {"help"}


def test_a_strategys_own_flags_are_hidden_only_where_the_script_does_not_run_it():
    only_single = HelpScope(strategies=("single",))
    single = {action.dest: action.help for action in build_parser("prog", "", only_single)._actions}
    every = {action.dest: action.help for action in build_parser("prog", "")._actions}
    for shared in FLAGS:
        assert (single[shared.dest] == argparse.SUPPRESS) == bool(shared.strategy), shared.names
        assert every[shared.dest] != argparse.SUPPRESS, shared.names


def test_each_copied_flag_fills_the_runconfig_field_of_its_name_as_parsed():
    names = {field.name for field in fields(RunConfig)}
    copied = [shared.dest for shared in FLAGS if shared.copied]
    assert set(copied) <= names
    defaults = build_parser("prog", "").parse_args([])
    given = set()
    for argv in ARGVS:
        args, config = build_parser("prog", "").parse_args(argv), parse_config(argv, "prog", "")
        for dest in copied:
            assert getattr(config, dest) == getattr(args, dest), (dest, argv)
        given |= {dest for dest in copied if getattr(args, dest) != getattr(defaults, dest)}
    assert given == set(copied), f"no command line above gives {sorted(set(copied) - given)} a value of its own"
