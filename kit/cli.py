"""Command line: run the kit's notebooks headless with Papermill.

    python -m kit.cli notebook 01 --profile smoke [-p name value ...] [--out results/01_harness_demo]

Each run writes the executed notebook and the notebook's outputs into its results folder.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from kit.paths import PROJECT_ROOT

NOTEBOOKS = {
    "01": "01_harness_demo",
    "02": "02_data_synthesis",
    "03": "03_vfold_rendering",
    "04": "04_sft_unsloth",
    "05": "05_rl_long_mdr",
    "06": "06_evaluation",
    "07": "07_publish",
}


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def run_notebook(key: str, profile: str = "smoke", params: dict | None = None, out_dir: str | Path | None = None,
                 kernel: str = "python3") -> Path:
    """Execute notebook ``key`` (``"01"`` or its name) headless and return the executed notebook path.

    Raises:
        FileNotFoundError: no such notebook in ``notebooks/``.
        papermill.PapermillExecutionError: a cell failed (the executed notebook is still written).
    """
    import papermill as pm

    name = NOTEBOOKS.get(key, key)
    src = PROJECT_ROOT / "notebooks" / f"{name}.ipynb"
    if not src.exists():
        raise FileNotFoundError(f"no notebook {src}; available: {sorted(p.stem for p in (PROJECT_ROOT / 'notebooks').glob('*.ipynb'))}")
    out = Path(out_dir) if out_dir else PROJECT_ROOT / "results" / name
    out.mkdir(parents=True, exist_ok=True)
    parameters = {"profile": profile, "out_dir": str(out), **(params or {})}
    dest = out / f"{name}.ipynb"
    pm.execute_notebook(str(src), str(dest), parameters=parameters, kernel_name=kernel, cwd=str(PROJECT_ROOT / "notebooks"),
                        progress_bar=False)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    nb = sub.add_parser("notebook", help="run one notebook headless with Papermill")
    nb.add_argument("key", help="notebook number (01..07) or name")
    nb.add_argument("--profile", default="smoke", choices=["smoke", "paper"])
    nb.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="parameter override (Python literal or string)")
    nb.add_argument("--out", default=None, help="results folder (default results/<notebook name>)")
    args = ap.parse_args(argv)
    if args.cmd == "notebook":
        try:
            dest = run_notebook(args.key, args.profile, {k: _value(v) for k, v in args.param}, args.out)
        except Exception as e:
            print(f"notebook {args.key} failed: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(f"executed notebook written to {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
