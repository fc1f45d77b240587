"""The asynchronous strategies, whose workers this process starts itself (no torchrun) and
whose updates it records as they land (algorithms/run/updates.py drives their pools):
`hogwild.py` (async: one model in shared memory), `param_server.py` (ps, over
torch.distributed.rpc) and `ps_worker.py` (a ps worker on another host), the first two
started by `workers.py`."""
