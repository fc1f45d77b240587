"""The parameter-server cluster of `--strategy ps`, started before TensorFlow loads.

Typed as one command (no TF_CONFIG), the command runs again as the chief
(`run_chief_in_namespace`), which makes the cluster on this machine
(`launch_local_ps`): `--devices` worker and `--ps_tasks` parameter-server
processes, each a `tf.distribute.Server` (`python -m tensorflow_wrapper.cluster`),
and itself the chief, which runs the ClusterCoordinator and does not train. With TF_CONFIG
set by the user, a worker or ps task serves (`serve`, never returns) and the chief
trains, as on several machines.

TensorFlow's gRPC server listens on 0.0.0.0 whatever host the cluster spec names
(grpc_server_lib.cc: `AddListeningPort(strings::StrCat("0.0.0.0:", port), ...)`),
and it runs any graph sent to it. So the local cluster is started inside a private
network namespace (a new user + network namespace whose only interface is
loopback): its ports cannot be reached from any other machine or container. Where
the kernel refuses unprivileged namespaces, the run says so in one line and its
ports are open on every interface.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import json
import os
import signal
import socket
import struct
import subprocess
import sys

from algorithms.ports import free_ports
from algorithms.errors import ResourceError
from algorithms.machine.resources import die_with_parent, why_not_started

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# every task: a failed RPC fails at once instead of waiting for the peer to come back
# (TensorFlow's parameter-server tutorial); the coordinator does its own retries
TASK_ENVIRONMENT = {"GRPC_FAIL_FAST": "use_caller", "TF_CPP_MIN_LOG_LEVEL": "2"}
PARENT_NAMESPACE_VARIABLE = "CNN_PARALLEL_PS_PARENT_NETNS"  # set for the chief by its launcher
NOTE_VARIABLE = "CNN_PARALLEL_PS_NETWORK"  # the launcher's namespace note, for results.log
NAMESPACE_NOTE = "private network namespace: the cluster's ports are reachable from this machine's loopback only"


def enter_private_network_namespace(launcher_pid: int) -> None:
    """In the forked child, before exec (the only moment a Python process is
    single-threaded, which unshare(CLONE_NEWUSER) requires): a new user + network
    namespace with loopback up. A refusal leaves the child where it was; the child
    finds out with `network_note`. The chief gets SIGTERM (a recorded interruption)
    should its launcher die."""
    die_with_parent(launcher_pid, signal.SIGTERM)
    uid, gid = os.getuid(), os.getgid()
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return
    for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:  # `ip link set lo up`
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def network_note() -> str:
    """In the chief: whether the launcher's namespace took, for results.log."""
    if os.readlink("/proc/self/ns/net") != os.environ.get(PARENT_NAMESPACE_VARIABLE):
        return NAMESPACE_NOTE
    return (
        "no private network namespace (the kernel refused an unprivileged user namespace); "
        "TensorFlow's servers listen on every interface (0.0.0.0) for this run"
    )


def run_chief_in_namespace(argv: list) -> int:
    """The command again, as the chief of the local cluster, in its own network
    namespace; this process only waits (it listens on nothing) and passes SIGTERM
    and SIGINT on, once: the chief has its own session, so a Ctrl-C reaches it (and
    its servers) only through here. Returns the chief's exit status."""
    env = {**os.environ, PARENT_NAMESPACE_VARIABLE: os.readlink("/proc/self/ns/net")}
    try:
        chief = subprocess.Popen(
            [sys.executable, *argv],
            env=env,
            preexec_fn=functools.partial(enter_private_network_namespace, os.getpid()),
            start_new_session=True,
        )
    except OSError as error:
        raise ResourceError(f"could not start the cluster's chief ({why_not_started(error)})") from None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, frame: chief.send_signal(received))
    while True:
        try:
            status = chief.wait()
            break
        except InterruptedError:
            continue
    return 128 - status if status < 0 else status


def launch_local_ps(workers: int, ps_tasks: int, threads: int) -> dict:
    """In the chief (run_chief_in_namespace's child): starts the servers and makes
    this process the chief (TF_CONFIG); returns {"note": ..., "pids": {"worker": [...], "ps": [...]}}."""
    note = network_note()
    ports = free_ports(1 + workers + ps_tasks)
    cluster = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{port}" for port in ports[1 : 1 + workers]],
        "ps": [f"127.0.0.1:{port}" for port in ports[1 + workers :]],
    }
    # the cores are shared: each worker computes on its share, a ps only applies updates
    intra = {"worker": max(1, threads // workers), "ps": 1}
    pids: dict = {"worker": [], "ps": []}
    started: list = []
    for kind in ("ps", "worker"):
        for index in range(len(cluster[kind])):
            task = {"cluster": cluster, "task": {"type": kind, "index": index}}
            env = {**os.environ, **TASK_ENVIRONMENT, "TF_CONFIG": json.dumps(task)}
            env["CNN_PARALLEL_TASK_THREADS"] = str(intra[kind])
            try:
                child = subprocess.Popen(
                    [sys.executable, "-m", "tensorflow_wrapper.cluster"],
                    env=env,
                    cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    preexec_fn=functools.partial(die_with_parent, os.getpid()),  # SIGKILL when the chief exits
                )
            except OSError as error:
                _stop(started)
                raise ResourceError(
                    f"could not start {kind} task {index} after {len(started)} other tasks of the cluster "
                    f"({why_not_started(error)}); they were stopped; run fewer --devices or --ps_tasks"
                ) from None
            started.append(child)
            pids[kind].append(child.pid)
    os.environ.update(TASK_ENVIRONMENT)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    return {"note": note, "pids": pids}


def _stop(children: list) -> None:
    for child in children:
        child.kill()
        child.wait()


def serve(threads: int) -> None:
    """A worker or ps task of TF_CONFIG's cluster: serve until killed. Inter-op threads:
    a parameter server holds a thread for each closure in flight (its part of the
    closure's function waits there for the worker's gradients), so it needs one per
    worker and one more, or the workers take turns."""
    os.environ.update(TASK_ENVIRONMENT)
    import tensorflow as tf

    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    workers = len(config["cluster"].get("worker", []))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(threads, workers + 1))
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]), job_name=task["type"], task_index=int(task["index"]), start=True
    )
    server.join()


if __name__ == "__main__":
    serve(int(os.environ.get("CNN_PARALLEL_TASK_THREADS", "1")))
