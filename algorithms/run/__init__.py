"""One run from flags to CSV: what every entry script does (entry.py), with the epoch
check it may run first (epoch_check.py) and the frameworks' start-up notices it drops
while one loads (notices.py); the loops that drive a wrapper's trainer (loop.py by hand
or an epoch at a time, updates.py for the asynchronous strategies); and --batch_size
auto (batch_finder.py), whose trials are probe processes (probe_process.py starts one
and reads it back; probe.py is the process, timing.py the library the wrappers'
native.py build on). The layers below hold the rest of a run: its flags and config
(config/), the wrapper contract (contract/), its bookkeeping (session/) and the machine
(machine/)."""
