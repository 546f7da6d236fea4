"""What the closed-loop figure scripts share (tests/flb_net_figures.py, tests/selb_net_figures.py): matplotlib
without a display, and writing a figure into docs/img/."""

import pathlib

IMG = pathlib.Path(__file__).resolve().parent.parent / "docs" / "img"


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, name, img=None):
    """Lay ``fig`` out and write it as ``name`` into ``img`` (default docs/img/); print the path."""
    img = img or IMG
    fig.tight_layout()
    img.mkdir(parents=True, exist_ok=True)
    fig.savefig(img / name, dpi=110)
    print(img / name)
