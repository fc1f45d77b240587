"""The float64 numpy reference of the spec: a network's forward and backward pass
(reference.py), one optimizer step from a trainer's state (reference_step.py) and that
state in the spec's layout and optimizer convention (train_state.py). The step check
(run/step_check.py), the yardstick and the localisation measure every framework against it."""
