"""A run's flags and configuration: the flags every entry script shares (flags.py),
which of them cannot run together (checks.py), the RunConfig they resolve to and the
optional flags a wrapper may implement (run_config.py), the learning-rate schedule they
describe (schedule.py), and the flags a parent takes out of the argv it passes on to a
child process (argv.py)."""
