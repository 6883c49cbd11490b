"""``python -m kit.cli doctor``: preflight checks of what a run needs, one line per check.

    python -m kit.cli doctor [--endpoint URL --model NAME] [--zim a.zim ...] [--tokenizer PATH]

Checks, in order:

* ``endpoint`` — the named OpenAI-compatible endpoint answers ``GET /models`` completely within 5 s
  and serves the named model (skipped, and said so, when none is named: runs then use the tiny
  random-weight model); without an endpoint, a named ``--model`` must be a checkpoint folder or a
  ``tiny-<arch>`` of a known architecture;
* ``zim`` — every ZIM archive (``--zim``, else the shared data folder's / the kit cache's) opens with
  libzim and holds articles (the local web);
* ``tokenizer`` — the token counter loads (``--tokenizer``: a checkpoint folder or served model name;
  default the offline Qwen tokenizer) and counts a probe text;
* ``sandbox`` — the ``execute_code`` sandbox starts in the isolation it resolves to (bubblewrap, or the
  rlimits fallback) and runs ``print(6 * 7)``;
* ``fonts`` — V-Fold's primary font (DejaVu Sans) and a fallback font that covers CJK (``中文``).

Each line is ``ok   <check>  <detail>``, ``FAIL <check>  <reason>`` or ``skip <check>  <why>``; the exit
code is 1 when any check fails, else 0.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CJK_PROBE = "中文"


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``status`` ``ok`` | ``FAIL`` | ``skip``, and a one-line ``detail``."""

    name: str
    status: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<4} {self.name:<9} {' '.join(self.detail.split())}"


def check_endpoint(endpoint: str | None, model: str | None, api_key_env: str = "OPENAI_API_KEY") -> Check:
    from kit.policy.factory import ModelUnavailable
    from kit.policy.factory import check_endpoint as probe

    if not endpoint:
        if model and model.startswith("tiny-"):
            from kit.policy.factory import tiny_problem

            problem = tiny_problem(model)
            if problem:
                return Check("model", "FAIL", problem)
        if model and not model.startswith("tiny-"):
            from kit.policy.factory import local_model_problem

            problem = local_model_problem(model)
            if problem:
                return Check("model", "FAIL", f"no endpoint named and {problem}")
            return Check("model", "ok", f"no endpoint named; checkpoint folder {model} is loaded in process")
        return Check("endpoint", "skip", "no endpoint named: runs use the tiny random-weight model (labelled smoke)")
    try:
        name, ids = probe(endpoint, model or "", os.environ.get(api_key_env))
    except ModelUnavailable as e:
        return Check("endpoint", "FAIL", str(e))
    return Check("endpoint", "ok", f"{endpoint} serves {name!r} (all served: {ids})")


def check_zims(paths: list[str | Path] | None = None) -> list[Check]:
    from kit.paths import zim_paths

    try:
        found = [Path(p) for p in paths] if paths else zim_paths()
    except FileNotFoundError as e:
        return [Check("zim", "FAIL", str(e))]
    if not found:
        return [Check("zim", "FAIL", "no ZIM archive found: set MMSEARCH_KIT_DATA (a folder with zim/), pass --zim, "
                                     "or run python -m kit.cli fetch-zim NAME")]
    out = []
    for p in found:
        try:
            from libzim.reader import Archive

            a = Archive(str(p))
            n = a.article_count
        except Exception as e:  # noqa: BLE001 - libzim raises RuntimeError / OSError variants
            out.append(Check("zim", "FAIL", f"{p}: cannot be opened with libzim ({type(e).__name__}: {e})"))
            continue
        if n < 1:
            out.append(Check("zim", "FAIL", f"{p}: opens but holds no articles"))
        else:
            out.append(Check("zim", "ok", f"{p.name}: {n} articles"))
    return out


def check_tokenizer(model: str | None = None) -> Check:
    try:
        if model and not model.startswith("tiny-"):
            from kit.policy.tokens import counter_for

            counter = counter_for(model)
            # a name that is not a folder gets the offline Qwen tokenizer: say so, it is an approximation
            what = model if Path(model).expanduser().is_dir() else f"{model!r} counted with the offline Qwen tokenizer"
        else:
            from kit.policy.tokens import QwenTokenCounter

            counter, what = QwenTokenCounter(), "offline Qwen tokenizer"
        n = counter.count_text("hello world")
    except Exception as e:  # noqa: BLE001 - any loading failure is the answer
        return Check("tokenizer", "FAIL", f"{model or 'offline Qwen tokenizer'}: {type(e).__name__}: {e}")
    if n < 1:
        return Check("tokenizer", "FAIL", f"{what} counts 'hello world' as {n} tokens")
    return Check("tokenizer", "ok", f"{what}: 'hello world' = {n} tokens")


def check_sandbox(isolation: str | None = None) -> Check:
    from kit.harness.code_exec import CodeSandbox, bwrap_probe, resolve_isolation

    try:
        mode = resolve_isolation(isolation)
    except Exception as e:  # noqa: BLE001 - CodeSandboxError / ValueError name the reason
        return Check("sandbox", "FAIL", f"{type(e).__name__}: {e}")

    async def probe():
        with tempfile.TemporaryDirectory(prefix="kit-doctor-") as d:
            async with CodeSandbox(Path(d) / "ws", isolation=mode, timeout_s=60) as box:
                return await box.run("print(6 * 7)")

    try:
        res = asyncio.run(probe())
    except Exception as e:  # noqa: BLE001
        return Check("sandbox", "FAIL", f"{mode}: the sandbox did not start ({type(e).__name__}: {e})")
    if not res.ok or res.stdout.strip() != "42":
        return Check("sandbox", "FAIL", f"{mode}: print(6 * 7) gave error={res.error} stdout={res.stdout.strip()[:80]!r} "
                                        f"stderr={res.stderr.strip()[-200:]!r}")
    note = "" if mode == "bwrap" else f" (bubblewrap not used: {bwrap_probe().detail})"
    return Check("sandbox", "ok", f"{mode} isolation runs code{note}")


def check_fonts(font_path: str | None = None) -> Check:
    from kit.extras import MissingExtraError

    try:
        from kit.vfold.fonts import default_chain
    except MissingExtraError as e:  # a core install: V-Fold is the 'vfold' extra
        return Check("fonts", "skip", str(e))

    try:
        chain = default_chain(9, font_path)
    except Exception as e:  # noqa: BLE001 - FontNotFoundError names the options
        return Check("fonts", "FAIL", f"{type(e).__name__}: {e}")
    missing = [c for c in CJK_PROBE if chain.face_for(ord(c)) < 0]
    primary = chain.faces[0].name if hasattr(chain, "faces") else "primary font"
    if missing:
        return Check("fonts", "FAIL", f"{primary} found, but no font covers CJK ({''.join(missing)!r}): install "
                                      "fonts-noto-cjk or set MMSEARCH_KIT_FALLBACK_FONTS")
    cjk = chain.faces[chain.face_for(ord(CJK_PROBE[0]))].name if hasattr(chain, "faces") else "a fallback font"
    return Check("fonts", "ok", f"{primary}; CJK drawn with {cjk}")


def run_checks(*, endpoint: str | None = None, model: str | None = None, api_key_env: str = "OPENAI_API_KEY",
               zims: list[str] | None = None, tokenizer: str | None = None, isolation: str | None = None,
               font_path: str | None = None, echo: Callable[[str], None] = print) -> list[Check]:
    """Run every check, echo one line each as it finishes, and return them."""
    checks: list[Check] = []
    steps: list[Callable[[], Check | list[Check]]] = [
        lambda: check_endpoint(endpoint, model, api_key_env), lambda: check_zims(zims),
        lambda: check_tokenizer(tokenizer or (model if not endpoint else None)),
        lambda: check_sandbox(isolation), lambda: check_fonts(font_path)]
    for step in steps:
        got = step()
        for c in got if isinstance(got, list) else [got]:
            echo(c.line())
            checks.append(c)
    return checks


def add_parser(sub) -> None:
    """Register the ``doctor`` sub-command on an argparse sub-parsers object."""
    dr = sub.add_parser("doctor", help="preflight: endpoint and model, ZIM archives, tokenizer, sandbox, fonts")
    dr.add_argument("--endpoint", default="", help="OpenAI-compatible base URL to check (e.g. http://localhost:8000/v1)")
    dr.add_argument("--model", default="", help="model name the endpoint must serve (or a checkpoint to tokenize with)")
    dr.add_argument("--api-key-env", default="OPENAI_API_KEY")
    dr.add_argument("--zim", nargs="+", default=None, help="ZIM archives (default: the shared data folder's)")
    dr.add_argument("--tokenizer", default=None, help="checkpoint folder or served model name for the token counter")
    dr.add_argument("--isolation", default=None, choices=["auto", "bwrap", "rlimits"], help="sandbox mode to test")
    dr.add_argument("--font", default=None, help="primary font file (default DejaVu Sans)")


def cmd(args) -> int:
    """The ``doctor`` command: exit 1 when any check fails."""
    checks = run_checks(endpoint=args.endpoint, model=args.model, api_key_env=args.api_key_env, zims=args.zim,
                        tokenizer=args.tokenizer, isolation=args.isolation, font_path=args.font)
    failed = [c.name for c in checks if c.status == "FAIL"]
    print(f"doctor: {len(failed)} check(s) failed: {', '.join(dict.fromkeys(failed))}" if failed
          else f"doctor: all {len(checks)} checks passed or skipped")
    return 1 if failed else 0
