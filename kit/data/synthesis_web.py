"""The web that data stages 2–4 search (WeAgent §4.2: the expert "searches the open web").

Stage 1's stable branch reads a local Wikipedia dump (§4.1 "we download the publicly available
Wikipedia data"): its seeds' pages and target images are ``zim://`` URLs of a Kiwix archive. Stages
2–4 (backward expansion, validation and query synthesis, trajectory sampling) and the event branch
search the web:

* ``"serper"`` — the live web (:class:`kit.web.live.SerperBackend`, needs ``SERPER_API_KEY``), the
  paper profile's default. :class:`LiveWithArchive` sends every search to it and serves ``fetch`` of
  ``zim://`` URLs (the seed pages) from the archive, everything else from the live web.
* ``"zim"`` — the local ZIM web (:class:`kit.web.zim.LocalZimWeb`), the smoke profile's default.
  Chosen explicitly under the paper profile, its outputs carry :data:`LOCAL_WEB_LABEL`.

:func:`resolve_web_backend` decides before any work (no network): a paper run with the live web and
no key stops with :class:`LiveWebRequired` naming both ways out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kit.cli_spec import ParameterError
from kit.types import ImageHit, Page, ReverseImageResult, SearchBackend, SearchHit

WEB_BACKENDS = ("serper", "zim")
#: Label of paper-profile outputs whose stages 2–4 ran on the local ZIM web instead of the live web.
LOCAL_WEB_LABEL = "local-web"
#: The note a paper-profile summary/manifest carries when its run used the local web (RL rollouts, evaluation).
LOCAL_WEB_NOTE = "local web (ZIM), not the paper's live web"
SERPER_KEY_ENV = "SERPER_API_KEY"


class LiveWebRequired(ParameterError):
    """The paper profile's live web cannot be used (no ``SERPER_API_KEY``); one line, names the fix."""


def resolve_web_backend(profile: Any, choice: str | None = None, env: Mapping[str, str] | None = None,
                        parameter: str = "web_backend", key: str = "data.web_backend") -> str:
    """``"serper"`` or ``"zim"``: ``choice``, else the profile's recipe row ``key`` (paper: ``"serper"``, smoke
    and preflight: ``"zim"``). ``key``: ``data.web_backend`` (stages 2-4), ``rl_run.web_backend`` (RL rollouts,
    notebook 05), ``eval.web_backend`` (evaluation, notebook 06).

    Raises:
        ParameterError: ``choice`` not in :data:`WEB_BACKENDS`.
        LiveWebRequired: ``"serper"`` while ``env`` (default ``os.environ``) has no ``SERPER_API_KEY``.
    """
    from kit.profiles import get_profile

    p = get_profile(profile)
    backend = choice or str(p.value(key))  # the recipe's: paper serper (WeAgent §3.2/§4.2), smoke zim
    if backend not in WEB_BACKENDS:
        raise ParameterError(f"{parameter}={backend!r}: choose one of {', '.join(map(repr, WEB_BACKENDS))}")
    env = os.environ if env is None else env
    if backend == "serper" and not env.get(SERPER_KEY_ENV) and p.preflight and choice is None:
        return "zim"  # a preflight's stand-in for the live web (its outputs say preflight and local-web)
    if backend == "serper" and not env.get(SERPER_KEY_ENV):
        why = (f"{parameter}='serper' is the live web" if choice is not None
               else "the paper profile runs data stages 2-4 on the live web (WeAgent §4.2)" if key == "data.web_backend"
               else f"the {p.name} profile's {key} is the live web ({_citation(p, key)})")
        raise LiveWebRequired(f"{why} but {SERPER_KEY_ENV} is not set: export {SERPER_KEY_ENV}, or pass "
                              f"{parameter}='zim' (-p {parameter} zim) for the local ZIM web, the labelled offline "
                              f"choice (outputs labelled {LOCAL_WEB_LABEL!r})")
    return backend


def _citation(p: Any, key: str) -> str:
    """``"<recipe title> <source>"`` of the profile's row ``key`` (the paper section that asks for it)."""
    r = p.recipe_obj()
    e = r.entries.get(key)
    return f"{r.title} {e.source or e.kit}" if e is not None else f"recipe {r.label}"


def web_labels(profile: Any, backend: str) -> list[str]:
    """``[LOCAL_WEB_LABEL]`` when a non-smoke run uses the local web, else ``[]`` (smoke is offline anyway)."""
    from kit.profiles import get_profile

    return [LOCAL_WEB_LABEL] if backend == "zim" and not get_profile(profile).smoke else []


class LiveWithArchive:
    """Searches on ``live``; ``fetch`` of a ``zim://`` URL from ``archive`` (the stable seeds' pages),
    any other URL from ``live``. Errors are the backends' :class:`~kit.types.BackendError`."""

    def __init__(self, live: SearchBackend, archive: SearchBackend):
        self.live, self.archive = live, archive
        self.name = f"{live.name}+{archive.name}"

    async def search(self, query: str, num: int) -> list[SearchHit]:
        return await self.live.search(query, num)

    async def image_search(self, query: str, num: int) -> list[ImageHit]:
        return await self.live.image_search(query, num)

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult:
        return await self.live.reverse_image_search(image, num)

    async def fetch(self, url: str) -> Page:
        return await (self.archive if url.startswith("zim://") else self.live).fetch(url)


def open_synthesis_web(backend: str, zims: Sequence[str | os.PathLike], cache_path: str | Path, *,
                       live: SearchBackend | None = None, index_dir: str | Path | None = None):
    """``(backend wrapped in the shared cache pool, the cache)`` for stages 2–4.

    ``backend``: ``"zim"`` (local web over ``zims``) or ``"serper"`` (:class:`LiveWithArchive` of
    ``live``, default a :class:`~kit.web.live.SerperBackend` reading ``SERPER_API_KEY``, and the archives).

    Raises:
        ParameterError: an unknown backend. ValueError: ``"serper"`` without a key.
    """
    from kit.web.cache import CachedBackend, ToolCache
    from kit.web.zim import LocalZimWeb

    if backend not in WEB_BACKENDS:
        raise ParameterError(f"web backend {backend!r}: choose one of {', '.join(map(repr, WEB_BACKENDS))}")
    local = LocalZimWeb([Path(z) for z in zims], index_dir=index_dir)
    if backend == "serper":
        from kit.web.live import SerperBackend

        web: SearchBackend = LiveWithArchive(live or SerperBackend(), local)
    else:
        web = local
    cache = ToolCache(cache_path)
    return CachedBackend(web, cache), cache
