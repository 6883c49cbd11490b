"""The committed notebooks are already in the form JupyterLab saves (issue: every notebook marked modified
on open; saving notebook 03 unedited rewrote its metadata). JupyterLab stores the kernel's ``language_info``
(ipykernel's ``kernel_info`` reply) and the kernelspec on open, and jupyter_server saves with
``nbformat.write`` (keys sorted, ``indent=1``, non-ASCII kept, a trailing newline). Checked by opening and
saving notebook 03 in a headless JupyterLab: byte-identical, not marked dirty (before: 12+/3- lines). Static,
no kernel: well under a second."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_saved_as_jupyterlab_saves_it(path):
    text = path.read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    assert nbformat.writes(nb) + "\n" == text, f"{path.name}: rewrite it with nbformat.write (sorted keys)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_language_info_is_what_the_kernel_reports(path):
    from ipykernel.ipkernel import IPythonKernel

    meta = nbformat.read(path, as_version=nbformat.NO_CONVERT).metadata
    reported = dict(IPythonKernel.language_info)
    # the Python version is the one of the machine that saved it last; every other field is ipykernel's own
    assert {k: v for k, v in meta.language_info.items() if k != "version"} == \
        {k: v for k, v in reported.items() if k != "version"}
    assert meta.language_info["version"].count(".") == 2
    assert list(meta.kernelspec) == ["display_name", "language", "name"] and meta.kernelspec["name"] == "mmsearch-kit"
