"""The benchmark's precision axis (`benchmark.py --precision fp32,bf16,fp16`): which
frameworks run a precision (their `supported()`), the CPU's low-precision matmul units
(read from /proc/cpuinfo: without them a bf16 or fp16 matmul is emulated in fp32 units and
cannot beat fp32), each precision's peak, and each row against its fp32 row. Imports no
framework."""

from __future__ import annotations

from algorithms.config.flags import PRECISIONS
from algorithms.machine.tuning import cpu_flags, flags_in

# the x86 flags of the units that run bf16 / fp16 matmuls natively (Linux's names)
LOW_PRECISION_UNITS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512_fp16")
FP32 = PRECISIONS[0]


def cpu_units(cpuinfo: str) -> list:
    """The LOW_PRECISION_UNITS among the first processor's flags in /proc/cpuinfo's text."""
    return units_among(flags_in(cpuinfo))


def units_among(flags: set) -> list:
    """The LOW_PRECISION_UNITS in a set of CPU flags, in LOW_PRECISION_UNITS's order."""
    return [unit for unit in LOW_PRECISION_UNITS if unit in flags]


def machine_units(path: str = "/proc/cpuinfo") -> str:
    """ "amx_bf16 avx512_bf16 ..." as this machine has them, "none", or "unknown" without /proc/cpuinfo."""
    flags = cpu_flags(path)
    if flags is None:
        return "unknown"
    return " ".join(units_among(flags)) or "none"


def refusal(support, precision: str) -> str:
    """Why a framework does not train in `precision` (its wrapper's own advice), "" where it does."""
    flag = f"--precision {precision}"
    if precision == FP32 or flag in support.flags:
        return ""
    return support.advice.get(flag) or f"{flag} is not among its flags"


def peaks(gemm_by_precision: dict) -> dict:
    """{precision: best GEMM GFLOP/s}: each precision's peak is the best framework's own matmul at it."""
    return {precision: max(rates, default=0.0) for precision, rates in gemm_by_precision.items()}


def add_speedups(rows: list) -> None:
    """Each row's `speedup_over_fp32` (the fp32 row's ms / its ms) and `gemm_speedup_over_fp32`
    (its GEMM rate / the fp32 row's): the same framework, backend and setting; blank where
    either row did not run."""
    fp32 = {
        (row["framework"], row["backend"], row["setting"]): row
        for row in rows
        if row["precision"] == FP32 and row["status"] == "ok"
    }
    for row in rows:
        base = fp32.get((row["framework"], row["backend"], row["setting"]))
        if base is None or row["status"] != "ok":
            continue
        row["speedup_over_fp32"] = f"{float(base['ms_per_step']) / float(row['ms_per_step']):.2f}"
        if float(base["gemm_gflops"] or 0) > 0 and row["gemm_gflops"]:
            row["gemm_speedup_over_fp32"] = f"{float(row['gemm_gflops']) / float(base['gemm_gflops']):.2f}"
