"""Every paper-profile notebook command the README, the docs pages and the notebooks' own markdown show
(``python -m kit.cli notebook NN --profile paper|points_seeker ...``) names every parameter the run needs:
it passes the CLI's offline checks (types, then :func:`kit.cli_params.check_combinations`) as written.
Commands with a ``...`` placeholder are sketches and skipped."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from kit.cli import _value, build_parser, notebook_name, profile_problem
from kit.cli_params import check_combinations, check_params, notebook_parameters
from kit.paths import PROJECT_ROOT

COMMAND = re.compile(r"python -m kit\.cli notebook .*--profile (?:paper|points_seeker)")


def _code_blocks(text: str):
    """The fenced blocks of a markdown text (fences toggle line by line: ```bash opens, ``` closes)."""
    block: list[str] | None = None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is not None:
                yield "\n".join(block) + "\n"
            block = [] if block is None else None
        elif block is not None:
            block.append(line)


def _sources():
    for path in [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]:
        yield path.name, path.read_text(encoding="utf-8")
    for path in sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                yield path.name, "".join(cell["source"])


def paper_commands() -> list[tuple[str, str]]:
    """``(where, command)`` of every complete paper-profile notebook command (continuations joined, comments cut)."""
    out = []
    for where, text in _sources():
        for block in _code_blocks(text):
            for line in block.replace("\\\n", " ").splitlines():
                if COMMAND.search(line) and "..." not in line:
                    out.append((where, line[line.index("python -m kit.cli"):].split("  #")[0].strip()))
    return out


def test_the_readme_shows_paper_commands():
    assert any(where == "README.md" for where, _ in paper_commands())


@pytest.mark.parametrize("where, command", paper_commands())
def test_documented_paper_command_passes_the_checks_as_written(where, command, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "documented")  # the blocks export it: the paper recipes' live web
    argv = shlex.split(command)[3:]  # after "python -m kit.cli"
    args = build_parser().parse_args(argv)
    name = notebook_name(args.key)
    declared = notebook_parameters(PROJECT_ROOT / "notebooks" / f"{name}.ipynb")
    assert profile_problem(declared, args.profile, name) is None
    params = check_params(declared, {k: _value(v) for k, v in args.param}, name)
    check_combinations(declared, params, args.profile, f"{where}: {command}", preflight=args.preflight)
