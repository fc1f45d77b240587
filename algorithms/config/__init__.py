"""A run's flags and configuration: the flags every entry script shares, declared once as
a table (flags.py), the parser built from it (parser.py), the types that check a value
on its own (values.py), which flags cannot run together (checks.py), the RunConfig they
resolve to and the optional flags a wrapper may implement (run_config.py), the
learning-rate schedule they describe (schedule.py), and the flags a parent takes out of
the argv it passes on to a child process (argv.py)."""
