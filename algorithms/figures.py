"""The figures the commands draw for a person, begun and ended the same way everywhere:
matplotlib's pyplot without a display (`pyplot`), each plot's faint grid and legend
(`grid_and_legend`), and the PNG written at one resolution, the figure then closed
(`save_figure`). matplotlib is imported only when a figure is drawn."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend: PNGs, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grid_and_legend(*axes, fontsize: int, which: str = "major", **legend) -> None:
    """Each of `axes` gets a faint grid and its legend (`legend`: more of legend()'s options)."""
    for axis in axes:
        axis.grid(alpha=0.3, which=which)
        axis.legend(fontsize=fontsize, **legend)


def save_figure(figure, path: str, tight_layout: bool = True, **savefig) -> None:
    """`figure` as a PNG at `path`, 110 dpi, laid out tight first (`tight_layout=False`
    where savefig's own options place it, e.g. bbox_inches="tight" round a colour bar),
    then closed."""
    if tight_layout:
        figure.tight_layout()
    figure.savefig(path, dpi=110, **savefig)
    pyplot().close(figure)
