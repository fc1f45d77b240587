"""What a node of a multi-node launch (`python -m torch_wrapper.agent --nnodes 2 ...
--rdzv_backend c10d --rdzv_endpoint HOST:PORT`) needs to find its peers when its hostname
does not resolve to its cluster address (containers, network namespaces, many clusters),
decided from the endpoint alone so the same command works on every node:

- its own address: the one this machine sends from towards the endpoint (`--local_addr`,
  unless given), advertised to the other nodes instead of the hostname;
- the interface holding that address: GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME and, on GPUs,
  NCCL_SOCKET_IFNAME (unless set), so every rank's sockets bind it and nothing else;
- whether it hosts the rendezvous: torch guesses from the hostname (a false "no" in a
  namespace or container leaves every node waiting for a store nobody hosts); here the node
  whose interfaces hold the endpoint's address hosts it, on a socket bound to that address
  (torch's TCPStore would bind every interface).

torchrun typed by hand needs the same by hand: `--rdzv_conf is_host=1` on the endpoint's
node, `--local_addr ADDRESS` and GLOO_SOCKET_IFNAME on every node (docs/parallel.md)."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from urllib.parse import urlparse

from algorithms.errors import InputError
from algorithms.ports import address_towards, interface_of, ipv4_of, is_local, split_endpoint

BOUND_C10D = "c10d-bound"  # the rendezvous backend registered here: c10d, its store bound to one address
BOUND_RPC = "rpc-bound"  # the init method of --strategy ps across hosts: tcp://, its store bound to one address
RANKS_STORE_TIMEOUT = timedelta(minutes=5)  # TCPStore's default, which torch's own server gets


def bound_store(address: str, port: int, timeout: timedelta):
    """A TCPStore server listening on `address` alone (port 0: any free port)."""
    import torch.distributed as dist

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(128)
    port = listener.getsockname()[1]
    return dist.TCPStore(
        address, port, is_master=True, multi_tenant=True, timeout=timeout, master_listen_fd=listener.detach()
    )


def _bound_c10d_handler(params):
    """torch's c10d rendezvous handler with both its stores bound to one address: the
    rendezvous store, which the endpoint's node hosts on the endpoint's address and the
    other nodes connect to, and the ranks' store, which the node of global rank 0 hosts
    on its --local_addr."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    host, port = split_endpoint(params.endpoint)
    address = ipv4_of(host)
    timeout = timedelta(seconds=params.get_as_int("read_timeout", 60))
    if is_local(address):
        store = bound_store(address, port, timeout)
    else:
        store = dist.TCPStore(address, port, is_master=False, multi_tenant=True, timeout=timeout)

    class BoundBackend(C10dRendezvousBackend):
        @property
        def name(self) -> str:  # torch checks that the handler is the backend it asked for
            return BOUND_C10D

    handler = create_handler(store, BoundBackend(store, params.run_id), params)
    # the handler's own server for the ranks' store (torch's binds every interface), on this node's address
    handler._create_tcp_store_server = lambda master_addr, master_port: bound_store(
        master_addr, master_port, RANKS_STORE_TIMEOUT
    )
    return handler


def is_multi_node_tcp(args) -> bool:
    conf = args.rdzv_conf or ""
    return args.rdzv_backend == "c10d" and bool(args.rdzv_endpoint) and "store_type=file" not in conf


def prepare(args) -> None:
    """Fills in the address, the interfaces and the rendezvous backend of a node of a
    c10d launch over TCP (torchrun's parsed `args`); leaves every other launch alone, and
    `is_host` chosen by hand in --rdzv_conf to torch's own backend."""
    if not is_multi_node_tcp(args):
        return
    from torch.distributed.elastic.rendezvous.registry import handler_registry

    endpoint_address = ipv4_of(split_endpoint(args.rdzv_endpoint)[0])
    args.local_addr = args.local_addr or address_towards(endpoint_address)
    interface = interface_of(args.local_addr)
    for variable in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        os.environ.setdefault(variable, interface)
    if "is_host" not in (args.rdzv_conf or ""):
        handler_registry.register(BOUND_C10D, _bound_c10d_handler)
        args.rdzv_backend = BOUND_C10D


def check_endpoint_is_here(endpoint: str) -> None:
    host = split_endpoint(endpoint)[0]
    try:
        address = ipv4_of(host)
    except OSError:
        raise InputError(f"--ps_endpoint {endpoint}: {host} does not resolve to an IPv4 address") from None
    if not is_local(address):
        raise InputError(
            f"--ps_endpoint {endpoint}: {address} is not an address of this host; start the coordinator "
            "(torch_script.py) on the host that holds it, and the workers elsewhere with "
            "python -m torch_wrapper.asynchronous.ps_worker"
        )


def _bound_rpc_handler(url: str, **kwargs):
    """torch.distributed's tcp:// rendezvous with rank 0's store bound to the endpoint's
    address alone (tcp:// binds every interface); the other ranks connect to it."""
    import torch.distributed as dist

    parsed = urlparse(url)
    query = dict(pair.split("=", 1) for pair in parsed.query.split("&") if pair)
    rank, world = int(query["rank"]), int(query["world_size"])
    if rank == 0:
        store = bound_store(parsed.hostname, parsed.port, RANKS_STORE_TIMEOUT)
    else:
        store = dist.TCPStore(parsed.hostname, parsed.port, is_master=False, timeout=RANKS_STORE_TIMEOUT)
    yield store, rank, world


def rpc_meeting(endpoint: str) -> tuple:
    """(init method, interface) of a process of a ps run across hosts: the endpoint's
    store bound to its address, and the interface this host reaches it through, which
    TensorPipe and gloo bind."""
    from torch.distributed.rendezvous import _rendezvous_handlers, register_rendezvous_handler

    if BOUND_RPC not in _rendezvous_handlers:
        register_rendezvous_handler(BOUND_RPC, _bound_rpc_handler)
    host, port = split_endpoint(endpoint)
    address = ipv4_of(host)
    return f"{BOUND_RPC}://{address}:{port}", interface_of(address_towards(address))
