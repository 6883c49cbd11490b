"""Command line: run the kit's notebooks headless with Papermill, publish, download and replay.

    python -m kit.cli notebook 01 --profile smoke [-p name value ...] [--run NAME | --out DIR] [--fail-on-error 0.1]
    python -m kit.cli sequence --run smoke [--only 01 03 06] [--profile smoke] [-p name value] [-p 06.name value]
    python -m kit.cli sequence --run smoke --resume          # continue from the notebook that failed
    python -m kit.cli publish results/smoke/06_evaluation --results-repo ORG/NAME --tag v0.1 [--dry-run]
    python -m kit.cli download ORG/NAME --revision v0.1 --repo-type dataset
    python -m kit.cli replay results/smoke/06_evaluation [--snapshot cache.sqlite] [--out DIR]
    python -m kit.cli fetch-zim wikipedia_en_100_mini_2022-10 [--sha256 HEX]   # the local web on a fresh machine
    python -m kit.cli doctor [--endpoint URL --model NAME] [--zim a.zim ...]     # preflight, one line per check
    python -m kit.cli recipe points_seeker [--json] [--preflight]   # a paper recipe's values and their sources
    python -m kit.cli recipe weagent_mmsearch --verl [--stage h20]  # its verl launch's Hydra overrides
    python -m kit.cli notebook 05 --profile paper --preflight        # a paper profile at its settings, tiny sizes
    python -m kit.cli serve-mcp a.zim [b.zim ...] --transport stdio|http [--port 8765]  # the 5 tools over MCP
    python -m kit.cli view RUN_DIR [OTHER_RUN_DIR] [-o OUT] [--inspect-log OUT.json]  # static run viewer (docs/viewer.md)
    python -m kit.cli livevqa-open LIVEVQA_DIR --out results/points_seeker/livevqa_open  # POINTS-Seeker A.4 RL data

``notebook`` writes the executed notebook and the notebook's outputs into its results folder.
``sequence`` runs 01 → 07 (or a chosen subset, in order) into ``results/<run>/<notebook>/``, writes
``results/<run>/sequence.json`` (the plan and each step's status) and ``results/<run>/manifest.json``,
and stops at the first failing notebook; ``--resume`` reruns the plan from that notebook on. A finished
sequence ends by building the viewer over every episode of the run (``results/<run>/view``, kit.view.run_view).
Notebooks run with the kit's own Jupyter kernel (kit.kernel, ``mmsearch-kit``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any

from kit.cli_catalog import _first_line
from kit.cli_notebook import (  # noqa: F401 - re-exported: one notebook's run (old import paths)
    MISMATCH_ERRORS,
    ModelRoleFailed,
    _KnownParameters,
    _quiet_papermill_name_check,
    notebook_name,
    run_notebook,
)
from kit.cli_sequence import (  # noqa: F401 - re-exported: the notebooks, the sequence command (old import paths)
    NOTEBOOKS,
    PROFILES,
    RESERVED,
    SEQUENCE_FILE,
    NotebookFailed,
    SequenceError,
    _declared,
    _given,
    _read_state,
    _write_state,
    plan_sequence,
    profile_problem,
    reserved_problem,
    run_sequence,
)
from kit.kernel import KERNEL_NAME, ensure_kernel, local_kernel_manager_class  # noqa: F401 - re-exported


def _value(text: str):
    """A ``-p`` VALUE, for the parameter's declared type to read (:func:`kit.cli_params.coerce`):

    * a quoted string (``'abc'`` → ``abc``), ``None``, ``True``, ``False``, a plain integer (``7``, ``-3``:
      written as Python writes it) and a bracketed list, tuple or dict of JSON values (``[1, 2]``, ``(1, 2)``,
      ``{'a': 1}``) are those Python values, as JSON holds them (a tuple is a list, a dict's keys are text);
    * anything else stays its text, exactly as typed: ``0x1F``, ``+7``, ``1_000``, ``007``, ``1e-4``, ``2.5``,
      ``1,2``, ``{1, 2}``, ``a.zim``. A text parameter keeps it; an int or float parameter reads it as a decimal
      number (``+7``, ``1_000``, ``1e-4``; never ``0x1F`` or ``007``), else the run stops (ParameterError).

    The result is a JSON value, so a sequence's recorded plan (``sequence.json``) reads back the same on resume.
    """
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value if str(value) == text else text  # 0x1F, +7, 1_000, " 5": the text
    if isinstance(value, (list, tuple, dict)) and text.lstrip()[:1] in ("[", "(", "{"):
        import json

        try:  # as sequence.json records it: a tuple is a list, a dict's keys are text
            return json.loads(json.dumps(value))
        except (TypeError, ValueError, RecursionError):
            return text  # it holds a set, bytes or a complex
    return text  # a float, a complex, a set, a bare tuple 1,2


# ---------------------------------------------------------------------------------------- sequence
def parse_overrides(pairs: list[tuple[str, str]] | list[list[str]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Split ``-p`` pairs into overrides for every notebook (``name``) and per notebook (``06.name``).
    Each value is read by :func:`_value` (a plain integer, a quoted string, ``None``/``True``/``False`` or a
    bracketed literal; else the text as typed), and typed later by each notebook's declaration
    (:func:`kit.cli_params.check_params`): a common ``-p tag 0x1F`` is the text ``0x1F`` for a text parameter.

    Raises:
        SequenceError: ``NN.name`` names an unknown notebook.
    """
    common: dict[str, Any] = {}
    per: dict[str, dict[str, Any]] = {}
    for name, raw in pairs:
        head, dot, rest = name.partition(".")
        if dot and head.isdigit():
            if head not in NOTEBOOKS:
                raise SequenceError(f"override {name!r}: no notebook {head} (known: {', '.join(NOTEBOOKS)})")
            per.setdefault(head, {})[rest] = _value(raw)
        else:
            common[name] = _value(raw)
    return common, per



# ---------------------------------------------------------------------------------------- commands
def _cmd_notebook(args) -> int:
    from kit.policy.factory import ModelUnavailable

    try:
        dest = run_notebook(args.key, args.profile, {k: _value(v) for k, v in args.param}, args.out,
                            progress=args.progress, preflight=args.preflight, run=args.run,
                            fail_on_error=args.fail_on_error)
    except (FileNotFoundError, ValueError, ModelUnavailable) as e:  # no such notebook/parameter, bad type, endpoint, run
        print(f"notebook {args.key}: {e}", file=sys.stderr)
        return 2
    except ModelRoleFailed as e:
        print(f"notebook {args.key}: the notebook ran, but a model role or judge failed:\n" + "\n".join(f"  {x}" for x in e.lines)
              + f"\nresults (kept, with each episode's error): {e.executed.parent}", file=sys.stderr)
        return 1
    except Exception as e:
        if getattr(e, "ename", None) in MISMATCH_ERRORS:  # raised in the kernel: a trainer's checkpoint of another run
            print(f"notebook {args.key}: {e.ename}: {e.evalue}", file=sys.stderr)  # type: ignore[attr-defined]
            return 2
        print(f"notebook {args.key} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    from kit.profiles import resolve_profile_name

    resolved = resolve_profile_name(args.profile)
    print(f"results: {dest.parent}" + (f" (profile {args.profile} is recipe {resolved})" if resolved != args.profile else ""))
    print(f"executed notebook: {dest}")
    for name in ("summary.md", "table1.md", "summary.csv"):  # what to read first, where the notebook wrote one
        if (dest.parent / name).is_file():
            print(f"summary: {dest.parent / name}")
            break
    if any(dest.parent.rglob("episodes.jsonl")):
        print(f"open the episodes: python -m kit.cli view {dest.parent}   (a static site: transcripts, images, verdicts)")
    return 0


def _cmd_sequence(args) -> int:
    try:
        common, per = parse_overrides(args.param)
        from kit.profiles import get_profile

        if args.resume and not (args.run or args.profile):
            raise SequenceError("--resume needs the run to continue: --run NAME (or --profile P for its default run)")
        # results/<profile run name>/ by default (weagent_mmsearch for paper, points_seeker_preflight, ...)
        try:
            run = args.run or get_profile(args.profile or "smoke", preflight=args.preflight).run_name
        except ValueError as e:  # --preflight with smoke: one line, exit 2
            raise SequenceError(str(e)) from None
        args.run = run
        run_sequence(run, args.only, profile=args.profile, common=common, per_notebook=per, resume=args.resume,
                     results_dir=args.results_dir, notebooks_dir=args.notebooks_dir, progress=not args.no_progress,
                     fail_on_error=args.fail_on_error, profile_preflight=True if args.preflight else None)
    except SequenceError as e:
        print(f"sequence: {e}", file=sys.stderr)
        return 2
    except NotebookFailed as e:
        if getattr(e.cause, "ename", None) in MISMATCH_ERRORS or isinstance(e.cause, ValueError):
            print(f"sequence stopped: {e}", file=sys.stderr)  # another run's folder or checkpoint: not a resumable failure
            return 2
        print(f"sequence stopped: {e}\nfix the cause, then continue with: python -m kit.cli sequence --run {args.run} --resume",
              file=sys.stderr)
        return 1
    return 0


def _cmd_publish(args) -> int:
    import httpx
    from huggingface_hub import get_token
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    from kit.hub.publish import PublishError, plan_run, publish

    plan = None
    try:
        if Path(args.run_dir).is_file():
            raise PublishError(f"{args.run_dir} is a file: give a results folder")
        plan = plan_run(args.run_dir, results_repo=args.results_repo, cache_repo=args.cache_repo,
                        dataset_repos=dict(args.dataset), checkpoint_repos=dict(args.checkpoint), tag=args.tag,
                        private=args.private)
        print(plan.listing())
        if args.dry_run:
            print("dry run: nothing uploaded")
            return 0
        if not get_token():
            raise PublishError("no Hugging Face token: run `hf auth login` or set HF_TOKEN (or use --dry-run)")
        for res in publish(plan):
            print(f"published {res['repo_type']} {res['repo_id']} at {res['commit']} tag {res['tag']}")
    except (PublishError, FileNotFoundError, ValueError) as e:
        print(f"publish: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except (HfHubHTTPError, OfflineModeIsEnabled, httpx.HTTPError, OSError) as e:
        print(f"publish: the Hub could not be reached or refused the upload: {type(e).__name__}: {_first_line(e)}",
              file=sys.stderr)
        return 1
    finally:
        if plan is not None:
            plan.discard()
    return 0


def _cmd_download(args) -> int:
    from kit.hub.download import DownloadError, download

    try:
        res = download(args.repo_id, revision=args.revision, repo_type=args.repo_type, cache_dir=args.cache_dir,
                       allow_patterns=args.include or None)
    except (DownloadError, ValueError) as e:
        print(f"download: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
        return 2
    print(f"{res.repo_type} {res.repo_id}@{res.revision} (commit {res.commit}) → {res.path}")
    return 0


def _cmd_replay(args) -> int:
    import asyncio

    from kit.eval.replay import ReplayError, replay_run

    try:
        report = asyncio.run(replay_run(args.run_dir, snapshot=args.snapshot, out_dir=args.out,
                                            allow_config_drift=args.allow_drift))
    except (ReplayError, FileNotFoundError, ValueError) as e:
        print(f"replay: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.identical else 1


def _cmd_fetch_zim(args) -> int:
    from kit.web.kiwix import ZimDownloadError, download_zim

    try:
        path = download_zim(args.source, args.dest, sha256=args.sha256)
    except (ZimDownloadError, ValueError, OSError) as e:
        print(f"fetch-zim: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(f"archive ready: {path}")
    return 0


def _cmd_recipe(args) -> int:
    from kit.cli_recipe import cmd_recipe  # the table, --json and --verl views

    return cmd_recipe(args)


def _cmd_livevqa_open(args) -> int:
    from kit.data import livevqa_cli

    return livevqa_cli.cmd(args)


def _cmd_view(args) -> int:
    from kit.view import cli as view_cli

    return view_cli.cmd(args)


def _cmd_doctor(args) -> int:
    from kit import doctor

    return doctor.cmd(args)


def _cmd_serve_web(args) -> int:
    from kit.serve import web_cli

    return web_cli.cmd(args)


def _cmd_serve_mcp(args) -> int:
    from kit.serve import mcp_cli

    return mcp_cli.run_cli(args)


def build_parser() -> argparse.ArgumentParser:
    """The ``kit`` argument parser: one subcommand a step (``notebook``, ``recipe``, ``sequence``, ``publish``,
    ``download``, ``replay``, ``doctor``, ``fetch-zim``, then the ones their own modules add)."""
    ap = argparse.ArgumentParser(prog="kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for add in (_add_notebook, _add_recipe, _add_sequence, _add_publish, _add_download, _add_replay):
        add(sub)
    from kit import doctor

    doctor.add_parser(sub)
    fz = sub.add_parser("fetch-zim", help="download a Kiwix ZIM archive (the local web) into the kit cache")
    fz.add_argument("source", help="Kiwix archive name (e.g. wikipedia_en_100_mini_2022-10) or URL of a .zim file")
    fz.add_argument("--sha256", default=None, help="expected sha256 (full or a prefix of >= 8 hex characters)")
    fz.add_argument("--dest", default=None, help="target folder (default: <kit cache>/zim, found by zim_paths)")

    from kit.serve import mcp_cli

    mcp_cli.add_parser(sub)  # serve-mcp (kit/serve/mcp_cli.py)
    from kit.serve import web_cli

    web_cli.add_parser(sub)  # serve-web (kit/serve/web_cli.py)
    from kit.view import cli as view_cli

    view_cli.add_parser(sub)  # view (kit/view/cli.py)
    from kit.data import livevqa_cli

    livevqa_cli.add_parser(sub)  # livevqa-open (kit/data/livevqa_cli.py): POINTS-Seeker's RL data step
    return ap


def _add_notebook(sub) -> None:
    """``notebook``: run one notebook headless with Papermill."""
    nb = sub.add_parser("notebook", help="run one notebook headless with Papermill")
    nb.add_argument("key", help="notebook number (01..07) or name")
    nb.add_argument("--profile", default="smoke", choices=PROFILES)
    nb.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="parameter override; VALUE is read as the parameter's declared type (0x1F stays text for "
                         "a text parameter; an int reads decimal digits only)")
    nb.add_argument("--run", default=None, help="run name: results/<run>/<notebook>/ (default the profile, e.g. smoke, "
                    "weagent_mmsearch for paper, points_seeker_preflight)")
    nb.add_argument("--out", default=None, help="results folder (default results/<run>/<notebook name>)")
    nb.add_argument("--fail-on-error", type=float, default=0.0, metavar="FRACTION",
                    help="tolerated share of a model role's episodes ending in error (policy or endpoint failure), "
                         "or of a judge's verdicts without a decision; above it the command exits 1 (default 0: any)")
    nb.add_argument("--progress", action="store_true", help="per-cell progress bar")
    nb.add_argument("--preflight", action="store_true",
                    help="a paper profile at its settings with sizes shrunk and tiny stand-in models (minutes on CPU)")


def _add_recipe(sub) -> None:
    """``recipe``: a paper recipe's resolved values with their sources (or its verl overrides)."""
    rc = sub.add_parser("recipe", help="print a paper recipe's resolved values with their sources")
    rc.add_argument("name", help="recipe name (kit/recipes/*.yaml), e.g. weagent_mmsearch, points_seeker, long_mdr")
    rc.add_argument("--json", action="store_true", help="JSON instead of a table")
    rc.add_argument("--preflight", action="store_true", help="with the preflight overlay applied")
    rc.add_argument("--verl", action="store_true", help="the verl launch's Hydra overrides, one per line")
    rc.add_argument("--stage", default=None, help="with --verl: the RL stage of the launch (default the first)")
    rc.add_argument("--verl-stages", action="store_true", help="the RL stages verl runs, one launch each, one per line")
    rc.add_argument("--stages", default=None,
                    help="with --verl/--verl-stages: the schedule (a named one such as weagent, or e.g. h10:200,h20)")


def _add_sequence(sub) -> None:
    """``sequence``: run 01 → 07 (or ``--only`` a subset) into ``results/<run>/``."""
    sq = sub.add_parser("sequence", help="run 01 → 07 (or --only a subset) headless into results/<run>/")
    sq.add_argument("--run", default=None, help="run name: outputs go to results/<run>/<notebook>/ (default the "
                    "profile: smoke, weagent_mmsearch for paper, ...)")
    sq.add_argument("--fail-on-error", type=float, default=0.0, metavar="FRACTION",
                    help="tolerated share of a model role's episodes ending in error in each notebook (default 0)")
    sq.add_argument("--only", nargs="+", default=None, metavar="NN", help="notebook keys to run (in 01 → 07 order)")
    sq.add_argument("--profile", default=None, choices=PROFILES, help="default smoke (on --resume: the recorded one)")
    sq.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="override for every notebook (NAME) or one notebook (NN.NAME)")
    sq.add_argument("--resume", action="store_true", help="continue the recorded plan from its failed notebook")
    sq.add_argument("--preflight", action="store_true",
                    help="every notebook as its paper profile's preflight (default run name: <profile>_preflight)")
    sq.add_argument("--results-dir", default=None, help="parent of the run folder (default results/)")
    sq.add_argument("--notebooks-dir", default=None, help="notebook folder (default notebooks/)")
    sq.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")


def _add_publish(sub) -> None:
    """``publish``: a run's results, cache snapshot, datasets and checkpoints to the Hub."""
    pb = sub.add_parser("publish", help="publish a run's results, cache snapshot, datasets and checkpoints")
    pb.add_argument("run_dir", help="a results folder (results/<run> or results/<run>/<notebook>)")
    pb.add_argument("--results-repo", default=None, help="dataset repo for evaluation results")
    pb.add_argument("--cache-repo", default=None, help="dataset repo for the tool-response cache snapshot")
    pb.add_argument("--dataset", nargs=2, action="append", default=[], metavar=("FOLDER", "REPO"),
                    help="publish a dataset folder (relative to run_dir) to REPO")
    pb.add_argument("--checkpoint", nargs=2, action="append", default=[], metavar=("FOLDER", "REPO"),
                    help="publish a checkpoint folder (LoRA adapter or merged model) to REPO")
    pb.add_argument("--tag", required=True, help="revision tag to create on every repo (e.g. v0.1-smoke)")
    pb.add_argument("--private", action="store_true")
    pb.add_argument("--dry-run", action="store_true", help="list exactly what would be uploaded; upload nothing")


def _add_download(sub) -> None:
    """``download``: a published repo at a revision into the standard HF cache."""
    dl = sub.add_parser("download", help="download a published repo at a revision into the standard HF cache")
    dl.add_argument("repo_id")
    dl.add_argument("--revision", required=True, help="tag, branch or commit sha")
    dl.add_argument("--repo-type", default="model", choices=["model", "dataset"])
    dl.add_argument("--cache-dir", default=None, help="default: the standard Hugging Face cache")
    dl.add_argument("--include", nargs="+", default=None, help="glob patterns of files to fetch")


def _add_replay(sub) -> None:
    """``replay``: an evaluation re-run from its tool-cache snapshot, offline, and compared."""
    rp = sub.add_parser("replay", help="re-run an evaluation from its tool-cache snapshot, offline, and compare")
    rp.add_argument("run_dir", help="evaluation results folder (manifest.json, predictions/, cache.sqlite)")
    rp.add_argument("--snapshot", default=None, help="cache snapshot (default run_dir/cache.sqlite)")
    rp.add_argument("--out", default=None, help="replay outputs (default a fresh temporary folder)")
    rp.add_argument("--allow-drift", action="store_true",
                    help="replay even when the harness configuration changed since the run (differences listed)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except BrokenPipeError:  # `recipe NAME | head`: the reader left; no traceback (Python's signal docs' recipe)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's final flush must not fail
        return 1


def _dispatch(args) -> int:
    return {"notebook": _cmd_notebook, "sequence": _cmd_sequence, "publish": _cmd_publish, "download": _cmd_download,
            "replay": _cmd_replay, "fetch-zim": _cmd_fetch_zim, "doctor": _cmd_doctor, "recipe": _cmd_recipe,
            "serve-mcp": _cmd_serve_mcp, "serve-web": _cmd_serve_web, "view": _cmd_view,
            "livevqa-open": _cmd_livevqa_open}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
