"""Sphinx extension: the figure gallery, drawn when the documentation is built.

At ``builder-inited`` (HTML builders only) it runs ``python -m figures --quick`` into the build's
``_gallery`` folder (the output tree, never the source tree), and the ``figure-gallery`` directive lists
every figure of :data:`figures.FIGURES` with its one-line command, its picture and the caption its JSON
states, so that a reader sees every figure before running anything.  A figure the run skipped or failed is
listed with the reason; Fig. 9 (a Performer trained for minutes) with its command only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from docutils import nodes
from docutils.parsers.rst import Directive

#: Folder of the drawn figures inside the HTML output.
GALLERY = "_gallery"
#: Seconds the quick run may take (a hang guard; it takes about half a minute on 2 cores).
TIMEOUT = 600
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _draw(app):
    app.env.figure_gallery = None
    if app.builder.format != "html":
        return
    out = os.path.join(app.outdir, GALLERY)
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=ROOT + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    proc = subprocess.run([sys.executable, "-m", "figures", "--quick", "--out", out, "--no-progress"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    try:
        with open(os.path.join(out, "index.json"), encoding="utf-8") as fh:
            index = {e["name"]: e for e in json.load(fh)["figures"]}
    except (OSError, ValueError, KeyError):
        index = {}
    app.env.figure_gallery = {"dir": out, "index": index, "returncode": proc.returncode,
                              "error": proc.stderr.strip().splitlines()[-1:] if proc.returncode else []}


def _caption(folder, name):
    try:
        with open(os.path.join(folder, f"{name}.json"), encoding="utf-8") as fh:
            return json.load(fh).get("caption", "")
    except (OSError, ValueError):
        return ""


class FigureGallery(Directive):
    """``.. figure-gallery::``: every figure with its command, picture and caption."""

    has_content = False

    def run(self):
        from figures import FIGURES

        state = getattr(self.state.document.settings.env, "figure_gallery", None)
        out = []
        entries = [(f.name, f.paper_label, f.description, f"python -m figures --only {f.name}") for f in FIGURES]
        entries.append(("fig9_performer_digits", "performer_fig",
                        "Fig. 9 analogue: a small Performer-ViT on scikit-learn's digits (trains for minutes; not "
                        "drawn here)", "python -m figures.reproduce performer"))
        for name, label, description, command in entries:
            section = nodes.section(ids=[f"gallery-{name}"])
            section += nodes.title(text=name + (f" (the paper's {label})" if label else " (beyond the paper)"))
            section += nodes.paragraph(text=description)
            section += nodes.literal_block(text=command, language="bash")
            entry = (state or {}).get("index", {}).get(name)
            if state is None or name == "fig9_performer_digits":
                pass
            elif entry is not None and entry.get("status") == "written":
                section += nodes.raw("", f'<img src="{GALLERY}/{name}.png" alt="{name}" style="max-width: 100%">',
                                     format="html")
                section += nodes.paragraph(text=_caption(state["dir"], name))
            else:
                why = (entry or {}).get("reason") or "; ".join(state.get("error", [])) or "not drawn in this build"
                section += nodes.paragraph(text=f"Not drawn in this build: {why}")
            out.append(section)
        return out


def setup(app):
    app.connect("builder-inited", _draw)
    app.add_directive("figure-gallery", FigureGallery)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
