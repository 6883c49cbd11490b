"""Optional-dependency checks for the kit's extras (TRL's ``is_X_available`` pattern).

The core install (``pip install mmsearch-kit``) gives the harness, the local web and the API policies; features
that need more (training, local models, figures, serving, notebooks) check their extra at their entry point, so a
missing package fails at once with one line naming the extra to install instead of a deep ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from types import ModuleType

#: the extras of pyproject.toml [project.optional-dependencies] that a feature may ask for
EXTRAS = ("models", "train", "notebooks", "serve", "figures", "fetch", "reverse", "hub", "eval", "vfold", "tracking", "all")


class MissingExtraError(ImportError):
    """A feature's optional dependency is not installed; ``extra`` names the pyproject extra that provides it."""

    def __init__(self, extra: str, missing: list[str], feature: str | None = None) -> None:
        self.extra = extra
        self.missing = list(missing)
        what = feature or "this feature"
        super().__init__(f"{what} needs the {extra!r} extra (missing: {', '.join(self.missing)}): "
                         f"pip install 'mmsearch-kit[{extra}]'", name=self.missing[0] if self.missing else None)


@cache
def is_available(module: str) -> bool:
    """True when the top-level ``module`` can be imported (found on the path; it is not imported).

    Cached: the answer does not change within a process (an install mid-run needs a restart anyway).
    """
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):   # a broken or half-installed package counts as missing
        return False


def require(extra: str, *modules: str, feature: str | None = None) -> None:
    """Raise :class:`MissingExtraError` unless every one of ``modules`` is importable.

    ``extra``: the extra that installs them (one of :data:`EXTRAS`; an unknown name is a programming error and
    raises ``ValueError``). ``feature``: what the user asked for, as the message's subject (e.g. ``"kit train"``).
    """
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    missing = [m for m in modules if not is_available(m)]
    if missing:
        raise MissingExtraError(extra, missing, feature)


#: The subject of the message when kit.rl's tensor code runs without torch.
RL_FEATURE = "kit.rl (losses, log-probs, training)"


def import_extra(extra: str, module: str, *, feature: str | None = None) -> ModuleType:
    """``module`` imported, after :func:`require` (so a missing one raises :class:`MissingExtraError` naming
    ``extra``, not a bare ``ModuleNotFoundError`` from deep inside a feature)."""
    require(extra, module, feature=feature)
    return importlib.import_module(module)
