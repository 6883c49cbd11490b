"""Issue 29 part 5: a quiet, guiding terminal. A headless notebook run prints no kernel-transport warning (its kernel
talks over IPC), the package metadata gives setuptools no licence deprecation to print, and the notebook command
ends with what to open."""

from __future__ import annotations

import tomllib

import nbformat

from kit.cli import run_notebook
from kit.kernel import kernelspec
from kit.paths import PROJECT_ROOT


def _notebook(folder, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nout_dir = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = kernelspec()
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "01_harness_demo.ipynb")


def test_a_headless_run_prints_no_kernel_transport_warning(tmp_path, capfd):
    _notebook(tmp_path / "nb", "import os\nprint('kernel ran', os.getpid())")
    dest = run_notebook("01", "smoke", {}, tmp_path / "out", notebooks_dir=tmp_path / "nb", check_endpoints=False,
                        echo=lambda s: None)
    out, err = capfd.readouterr()
    assert "kernel ran" in dest.read_text()
    assert "without encryption" not in out + err and "IPKernelApp" not in out + err, err


def test_the_licence_is_an_spdx_string_so_setuptools_prints_no_deprecation():
    meta = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in meta["project"].get("classifiers", []))
    assert any(r.startswith("setuptools>=77") for r in meta["build-system"]["requires"])


def test_the_notebook_command_ends_with_what_to_open(tmp_path, monkeypatch, capsys):
    from kit.cli import main

    out = tmp_path / "o"

    def ran(key, profile, params, out_dir, **kw):
        (out / "model").mkdir(parents=True)
        (out / "model" / "episodes.jsonl").write_text("")
        (out / "summary.md").write_text("| policy |")
        return out / "01_harness_demo.ipynb"

    monkeypatch.setattr("kit.cli.run_notebook", ran)
    assert main(["notebook", "01", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"summary: {out / 'summary.md'}" in text and f"python -m kit.cli view {out}" in text


def test_serve_web_help_shows_examples(capsys):
    import pytest

    from kit.cli import main

    with pytest.raises(SystemExit):
        main(["serve-web", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "curl -s localhost:8321/search" in out and "/r/https://" in out and "--make-certs" in out
