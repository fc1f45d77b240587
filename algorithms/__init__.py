"""Framework-neutral core: the network spec, initial weights, data, flags, recorder, loop,
comparison, the framework registry and the wrapper contract. Imports no deep-learning framework."""
