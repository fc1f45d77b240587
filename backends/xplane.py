"""TensorFlow's profiler output read back: the XSpace (`*.xplane.pb`) that
tf.profiler.experimental.stop() writes, summed into each TF op's self time.
tensorflow_wrapper and Keras on tensorflow read their profiles through this, Keras on
jax its XSpace files (`newest_xspace`, `self_times`: plain Python)."""

from __future__ import annotations

import collections
import glob
import os
import re

from algorithms.tables import shape_text

# a kernel's trace event is "op_name:OpType"; framework events ("ExecutorState::Process",
# "EagerLocalExecute: x", "ParallelFor") are not ops, but their time inside an op is the op's
TF_OP_EVENT = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")


def newest_xspace(logdir: str) -> str:
    """The path of the newest XSpace a profiler (TensorFlow's, jax's) wrote under `logdir`."""
    return max(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")), key=os.path.getmtime)


def read_xspace(logdir: str):
    """The newest XSpace the profiler wrote under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(newest_xspace(logdir), "rb") as handle:
        space.ParseFromString(handle.read())
    return space


def self_times(lines, is_op) -> dict:
    """{name: self ms} over threads' events, given per thread as (name, start, duration)
    in any one time unit (ps here): an op's time less the ops nested inside it on its
    thread; events `is_op` rejects count for the op around them."""
    totals, unit_ms = collections.Counter(), 1e-9
    for events in lines:
        open_ops = []  # [name, end, self time] of the ops enclosing this event
        for name, start, duration in sorted(events, key=lambda event: (event[1], -event[2])):
            if not is_op(name):
                continue
            while open_ops and open_ops[-1][1] <= start:
                done = open_ops.pop()
                totals[done[0]] += done[2] * unit_ms
            if open_ops:
                open_ops[-1][2] -= duration
            open_ops.append([name, start + duration, duration])
        for name, _, self_time in open_ops:
            totals[name] += self_time * unit_ms
    return totals


def tf_op_times(logdir: str) -> dict:
    """{"op_name:OpType": self ms} over the host plane's threads (python, tf_Compute, ...)."""
    space = read_xspace(logdir)
    lines = []
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            lines += [
                [
                    (names[event.metadata_id], line.timestamp_ns * 1000 + event.offset_ps, event.duration_ps)
                    for event in line.events
                ]
                for line in plane.lines
            ]
    return self_times(lines, TF_OP_EVENT.match)


def op_label(name: str, graph_shapes: dict) -> str:
    """ "Type name [input shapes]" from "name:Type" (shapes from the step's graph, when
    the profiled op is the graph's op: Grappler's fused ops have no graph twin)."""
    op_name, op_type = name.rsplit(":", 1)
    shapes = graph_shapes.get((op_name, op_type), "")
    return f"{op_type} {op_name} {shapes}".rstrip()


def graph_input_shapes(graph) -> dict:
    """{(op name, type): "[128,28,28,32] ... NHWC"} for a tf.function's graph."""
    shapes = {}
    for operation in graph.get_operations():
        text = shape_text([tensor.shape.as_list() for tensor in operation.inputs if tensor.shape.rank])
        layout = operation.node_def.attr["data_format"].s.decode() if "data_format" in operation.node_def.attr else ""
        shapes[(operation.name, operation.type)] = f"{text} {layout}".strip()
    return shapes
