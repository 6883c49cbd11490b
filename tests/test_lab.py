"""A clean JupyterLab and the run's viewer site (issue 18 parts 1 and 4): the kit's kernel has its own name
(notebooks, Makefile, headless runs), widgets are a dependency, every notebook opens with a "What you will
see" cell with its run times, the README opens JupyterLab at the repository root and shows the viewer and a
figure, and ``sequence`` ends by building ``results/<run>/view``."""

from __future__ import annotations

import inspect
import json
import re
import tomllib
from pathlib import Path

import lxml.html
import nbformat
import pytest
from PIL import Image

from kit.cli import NOTEBOOKS, run_notebook, run_sequence
from kit.harness.episode import EpisodeRecord, RegisteredImage, Task
from kit.kernel import KERNEL_NAME, ensure_kernel
from kit.paths import PROJECT_ROOT
from kit.types import ContentPart, Message
from kit.view.run_view import RUN_VIEW_IMAGE_MAX_SIDE, build_run_view

NOTEBOOK_FILES = sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb"))


def test_the_kits_kernel_has_its_own_name_everywhere():
    assert KERNEL_NAME != "python3" and len(NOTEBOOK_FILES) == 7
    for path in NOTEBOOK_FILES:
        spec = json.loads(path.read_text(encoding="utf-8"))["metadata"]["kernelspec"]
        assert spec["name"] == KERNEL_NAME, f"{path.name}: kernelspec {spec}"
    makefile = (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8")
    install = [ln for ln in makefile.splitlines() if "ipykernel install" in ln]
    assert len(install) == 1 and f"--sys-prefix --name {KERNEL_NAME} " in install[0]
    assert inspect.signature(run_notebook).parameters["kernel"].default == KERNEL_NAME


def test_headless_runs_execute_with_the_kits_kernel(tmp_path, monkeypatch):
    import papermill

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nout_dir = "."')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params]
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, tmp_path / "nbs" / f"{NOTEBOOKS['07']}.ipynb")
    seen = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda src, dest, **kw: seen.append(kw["kernel_name"]))
    run_notebook("07", "smoke", {}, tmp_path / "o", notebooks_dir=tmp_path / "nbs", check_endpoints=False)
    assert seen == [KERNEL_NAME]


def test_a_missing_kernel_is_installed_or_named(monkeypatch):
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def missing(self, name):
        raise NoSuchKernel(name)

    installed = []
    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", missing)
    monkeypatch.setattr(ipykernel.kernelspec, "install",
                        lambda **kw: installed.append(kw) or f"/prefix/share/jupyter/kernels/{kw['kernel_name']}")
    notes = []
    assert ensure_kernel(echo=notes.append).endswith(KERNEL_NAME)
    assert installed[0]["kernel_name"] == KERNEL_NAME and "installed the kit's Jupyter kernel" in notes[0]
    with pytest.raises(RuntimeError, match="'other' is not installed"):
        ensure_kernel("other")

    def read_only(**kw):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(ipykernel.kernelspec, "install", read_only)
    with pytest.raises(RuntimeError, match="make setup"):
        ensure_kernel()


def test_widgets_are_a_dependency_so_progress_bars_render():
    # the notebooks extra (docs/install.md), which make setup installs through 'all'
    deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(re.match(r"ipywidgets\b", d) for d in deps["notebooks"]) and "notebooks" in deps["all"][0]
    import ipywidgets  # noqa: F401  - installed (tqdm.auto falls back to text bars and warns without it)


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.stem)
def test_every_notebook_opens_with_what_you_will_see_and_its_run_times(path):
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    text = "".join(first["source"])
    assert first["cell_type"] == "markdown" and "What you will see" in text
    cpu = re.search(r"CPU[^\n]*?\b\d+(?:\.\d+)?\s*(?:s|min)\b", text)
    assert cpu, f"{path.name}: no CPU run time in its first cell"
    assert re.search(r"GPU[^\n]*estimate", text), f"{path.name}: no (estimated) GPU run time"


def test_readme_opens_jupyterlab_at_the_root_and_shows_the_viewer_and_a_figure():
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"`[^`]*\.venv/bin/jupyter lab`", readme) and "jupyter lab notebooks" not in readme
    assert f'"{KERNEL_NAME}"' in readme or f"`{KERNEL_NAME}`" in readme
    for name in ("viewer_index.png", "viewer_episode.png", "figure.png"):
        img = PROJECT_ROOT / "docs" / "img" / name
        assert f"(docs/img/{name})" in readme, f"README does not show docs/img/{name}"
        if img.exists() or name != "figure.png":  # figure.png comes with the regenerated smoke results
            assert img.stat().st_size <= 300_000 and Image.open(img).format == "PNG"


def _episode(workspace: Path) -> EpisodeRecord:
    Image.linear_gradient("L").resize((900, 500)).convert("RGB").save(workspace / "user_image_1.png")
    return EpisodeRecord(
        id="ep1", task=Task(id="ep1", question="Which bridge is this?", answers=["Tower Bridge"], source="toybench"),
        config_hash="h", policy="toy", status="answered", turns=1, tool_calls=0, workspace=str(workspace),
        messages=[Message(role="user", turn=0, content=[ContentPart(type="text", text="Which bridge is this?"),
                                                        ContentPart(type="image", image="user_image_1.png")]),
                  Message(role="assistant", turn=1, content=[ContentPart(type="text", text="<response>Tower Bridge</response>")])],
        final_response="Tower Bridge",
        images=[RegisteredImage(ref="user_image_1", filename="user_image_1.png", kind="user_image", sha256="0" * 64,
                                width=900, height=500, mime="image/png")])


def test_sequence_ends_by_building_the_runs_view(tmp_path):
    def runner(key, profile, params, out, **kw):  # stands in for papermill: each notebook writes one episode
        ws = out / "workspaces" / "ep1"
        ws.mkdir(parents=True)
        (out / "episodes.jsonl").write_text(_episode(ws).model_dump_json() + "\n")
        return out / "x.ipynb"

    nbs = tmp_path / "nbs"
    nbs.mkdir()
    for k in ("01", "06"):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell('profile = "smoke"\nout_dir = "."')]
        nb.cells[0].metadata["tags"] = ["parameters"]
        nbformat.write(nb, nbs / f"{NOTEBOOKS[k]}.ipynb")
    lines: list[str] = []
    run_sequence("r", ["01", "06"], results_dir=tmp_path / "res", notebooks_dir=nbs, runner=runner, echo=lines.append,
                 preflight=False)
    view = tmp_path / "res" / "r" / "view"
    rows = lxml.html.fromstring((view / "index.html").read_text(encoding="utf-8")).xpath("//table[@id='episodes']/tbody/tr")
    assert len(rows) == 2 and len(list((view / "episodes").rglob("*.html"))) == 2  # one site over both notebooks
    (img,) = (view / "images").iterdir()  # the same image once, shrunk for a committed site
    assert max(Image.open(img).size) == RUN_VIEW_IMAGE_MAX_SIDE
    assert any(str(view / "index.html") in x for x in lines)


def test_run_view_of_a_run_without_episodes_is_said_not_fatal(tmp_path):
    (tmp_path / "run" / "07_publish").mkdir(parents=True)
    notes: list[str] = []
    assert build_run_view(tmp_path / "run", echo=notes.append) is None
    assert "no viewer site" in notes[0] and "episodes.jsonl" in notes[0]
    (tmp_path / "run" / "view").mkdir()
    (tmp_path / "run" / "view" / "mine.txt").write_text("not a site")
    (tmp_path / "run" / "e").mkdir()
    (tmp_path / "run" / "e" / "episodes.jsonl").write_text(_episode(tmp_path / "run" / "e").model_dump_json() + "\n")
    with pytest.raises(ValueError, match="not a viewer site"):  # a folder it did not write is never deleted
        build_run_view(tmp_path / "run")
    assert (tmp_path / "run" / "view" / "mine.txt").exists()


def test_screenshot_script_shrinks_pngs_and_picks_the_committed_figure_first(tmp_path):
    import sys

    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    import screenshots

    noisy = Image.effect_noise((1400, 900), 120).convert("RGB")  # ~1.2 MB as a PNG
    out = screenshots.small_png(noisy, tmp_path / "s.png", max_bytes=150_000)
    assert out.stat().st_size <= 150_000 and Image.open(out).format == "PNG" and Image.open(out).width < 1400
    run = tmp_path / "run"
    (run / "03_vfold_rendering").mkdir(parents=True)
    Image.linear_gradient("L").resize((600, 300)).save(run / "03_vfold_rendering" / "tau_k_sweep.png")
    path, how = screenshots.figure_png(run, "03_vfold_rendering/tau_k_sweep", tmp_path / "figure.png")
    assert how == "the committed 03_vfold_rendering/tau_k_sweep.png" and Image.open(path).size == (600, 300)
    with pytest.raises(screenshots.ScreenshotError, match="cannot be drawn again"):
        screenshots.figure_png(run, "06_evaluation/figure6", tmp_path / "f.png")
    site = tmp_path / "site" / "episodes" / "0"
    site.mkdir(parents=True)
    for n in ("a__x.html", "b__demonstrator_y.html"):
        (site / n).write_text("<html></html>")
    assert screenshots.pick_episode(tmp_path / "site", None).name == "b__demonstrator_y.html"
    assert screenshots.pick_episode(tmp_path / "site", "a__").name == "a__x.html"
    with pytest.raises(screenshots.ScreenshotError, match="contains 'zzz'"):
        screenshots.pick_episode(tmp_path / "site", "zzz")
