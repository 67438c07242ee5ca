"""Tests of :mod:`figures._context`: the progress bar and the saved files."""

from _cli import bar_totals


# ---------------------------------------------------------------------------
# Issue 42's command-line findings, each reproduced first: help that states each default once, ``winners
# --draws`` that was silently ignored, ``table --protocol paper`` and ``split-spread`` that did not say where the
# gaps come from or how many draws resolve them, the README's Dask recipe that failed as a script, and progress
# inside long work (Fig. 8 by blocks of draws, the attention scan by cells, the performer experiment by steps).


def test_the_bar_shows_its_total_and_last_unit_however_fast_the_units_come():
    """tqdm draws an update only after its mininterval: in the full suite the fig8 bar's units came within one
    interval and no ``k/n`` was drawn (test_fig8_progress_by_blocks_of_draws failed under xdist, passed alone);
    a new total and the last unit are now drawn always.  Power: the plain tqdm bar draws neither."""
    import io
    from types import SimpleNamespace

    from tqdm import tqdm

    from figures._context import _Bar

    def run(wrap):
        stream = io.StringIO()
        bar = tqdm(total=None, desc="fig8 classification", mininterval=1e9, file=stream, leave=False)
        for done in range(6):
            msg = SimpleNamespace(done=done, total=5)
            if wrap:
                _Bar(bar).message(msg)
            else:
                bar.total = 5
                bar.update(done - bar.n)
        bar.close()
        return bar_totals(stream.getvalue(), "fig8 classification"), stream.getvalue()

    totals, text = run(True)
    assert totals == {5} and "5/5" in text
    assert run(False)[0] == set()


def test_saved_files_are_the_same_bytes_every_time(tmp_path):
    """Issue 42: a figure saved twice (written, and captured in a worker's way) is the same bytes each time: the
    PDF carries no creation date, whose seconds made two runs' PDFs differ.

    Power: matplotlib's own PDF of the figure carries /CreationDate."""
    import matplotlib.pyplot as plt

    from figures._context import Context

    def draw():
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0.5], marker="o")
        ax.set_title(r"$w_{ij}$ SimRFs")
        return fig

    files = []
    for k in range(2):
        Context(out=str(tmp_path / f"w{k}"), progress=False).save(draw(), "t", {"x": 1})
        files.append({ext: (tmp_path / f"w{k}" / f"t.{ext}").read_bytes() for ext in ("png", "pdf", "json")})
    captured = Context(out=str(tmp_path / "c"), progress=False, capture=True)
    captured.save(draw(), "t", {"x": 1})
    assert b"/CreationDate" not in files[0]["pdf"]
    assert files[0] == files[1]
    assert {ext: body if isinstance(body, bytes) else body.encode() for ext, body in captured.captured["t"].items()} == files[0]
    fig = draw()
    fig.savefig(tmp_path / "plain.pdf")
    plt.close(fig)
    assert b"/CreationDate" in (tmp_path / "plain.pdf").read_bytes()
