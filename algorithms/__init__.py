"""Framework-neutral core: the network spec, initial weights, data, flags, recorder, loop and comparison. Imports no deep-learning framework."""
