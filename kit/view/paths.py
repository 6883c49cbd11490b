"""Paths as the viewer shows them: never an absolute path of the machine that built the site
(issue 18: the smoke run's site is committed and opened elsewhere).

:func:`display_path` turns a local absolute path (or ``file://`` URL) into a portable name, the first
rule that applies:

1. inside a run folder of the site: the run's display name + the rest (``results/smoke/06_evaluation/...``);
2. inside the repository (:data:`kit.paths.PROJECT_ROOT`, when it is a checkout): relative to it;
3. inside the shared data folder (:func:`kit.paths.shared_data_dir`): ``$MMSEARCH_KIT_DATA/...``;
4. inside the kit cache (:func:`kit.paths.cache_dir`): ``$MMSEARCH_KIT_CACHE/...``;
5. inside the home folder: ``~/...``;
6. inside the temporary folder (:func:`tempfile.gettempdir`): ``$TMPDIR/...``;
7. inside the parent folder of a run of the site (a sibling of the run): ``…/...``;
8. elsewhere: ``…/`` + its last three parts (``…/fvqa_mmsearch_r1/images/017.png``).

URLs (http, https, data ...) and relative paths are shown unchanged. :class:`PathScrubber` applies
rules 1-7 to every occurrence of those folders in a rendered page (a path inside an observation, an
event detail, a traceback, a tool call's arguments, a ``file://`` URL), then rule 8 to every other
absolute path token of two or more parts (also ``C:\\...``), so the guarantee holds for text the kit does not parse.
The labels it inserts are HTML-escaped (a run folder may be named ``<img onerror=...>``).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markupsafe import escape

from kit.paths import PROJECT_ROOT, cache_dir, shared_data_dir

DATA_ENV = "$MMSEARCH_KIT_DATA"
CACHE_ENV = "$MMSEARCH_KIT_CACHE"
TMP_ENV = "$TMPDIR"
ELSEWHERE = "…"
_TAIL_PARTS = 3  # kit: enough to name a benchmark image (<dataset>/images/<file>) without the machine's prefix


def _repo_root() -> Path | None:
    """The checkout the kit runs from (None for an installed package: site-packages is no repository)."""
    return PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").is_file() else None


def _forms(p: str | os.PathLike) -> list[str]:
    """The absolute and the symlink-resolved form of a folder (both may appear in recorded paths)."""
    a = os.path.abspath(p)
    try:
        r = str(Path(a).resolve())
    except (OSError, RuntimeError):
        r = a
    return list(dict.fromkeys([a, r]))


def _under(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` (POSIX, "" for the folder itself), or None when not inside."""
    if path == folder:
        return ""
    if folder != os.sep and path.startswith(folder + os.sep):
        return Path(path[len(folder) + 1:]).as_posix()
    return None


def _join(label: str, rest: str) -> str:
    if not rest:
        return label or "."
    return f"{label}/{rest}" if label else rest


def _home() -> str | None:
    h = os.path.expanduser("~")
    return h if h not in ("~", os.sep, "") else None


def run_display(root: str | os.PathLike) -> str:
    """How the viewer names a run folder: its path relative to the repository when inside it
    (``results/smoke``), else the folder's name (never this machine's absolute path)."""
    repo = _repo_root()
    for form in _forms(root):
        for rf in _forms(repo) if repo is not None else []:
            rel = _under(form, rf)
            if rel is not None:
                return rel or "."
    return Path(os.path.abspath(root)).name or "run"


def _prefixes(runs: dict[str, str] | None) -> list[tuple[str, str]]:
    """(absolute folder, label) pairs, longest folder first, so the most specific rule wins."""
    pairs: list[tuple[str, str]] = []
    for folder, label in (runs or {}).items():
        pairs += [(f, label) for f in _forms(folder)]
    repo = _repo_root()
    if repo is not None:
        pairs += [(f, "") for f in _forms(repo)]
    try:
        data = shared_data_dir()
    except FileNotFoundError:  # a wrong MMSEARCH_KIT_DATA: no data folder can be named in a page
        data = None
    if data is not None:
        pairs += [(f, DATA_ENV) for f in _forms(data)]
    try:
        pairs += [(f, CACHE_ENV) for f in _forms(cache_dir())]
    except OSError:  # an uncreatable cache folder: nothing of it can be in a page either
        pass
    home = _home()
    if home is not None:
        pairs += [(f, "~") for f in _forms(home)]
    pairs += [(f, TMP_ENV) for f in _forms(tempfile.gettempdir())]
    known = [f for f, _ in pairs]
    for folder in runs or {}:  # a sibling of a run (its parent holds other runs, a site): "…/sibling"
        for f in _forms(os.path.dirname(os.path.abspath(folder))):
            if not any(_under(f, k) is not None for k in known):
                pairs.append((f, ELSEWHERE))
    seen: dict[str, str] = {}
    for f, lab in pairs:
        if f != os.sep:
            seen.setdefault(f, lab)
    return sorted(seen.items(), key=lambda x: -len(x[0]))


def _tail(path: str) -> str:
    """Rule 8: ``…/`` + the last :data:`_TAIL_PARTS` parts of an absolute path."""
    tail = Path(path).parts[1:][-_TAIL_PARTS:]
    return "…/" + "/".join(tail) if tail else path


def display_path(value: str | None, runs: dict[str, str] | None = None) -> str:
    """``value`` as a page may show it (module doc for the rules); ``runs`` maps run folders to their
    display names (:func:`run_display`). ``None`` / ``""`` give ``""``."""
    if not value:
        return ""
    path = value
    parts = urlsplit(value)
    if parts.scheme == "file":
        path = unquote(parts.path)
    elif parts.scheme and len(parts.scheme) > 1:  # http(s), data:, s3: ... (a Windows drive letter has one)
        return value
    if not os.path.isabs(path):
        return value
    path = os.path.normpath(path)
    for folder, label in _prefixes(runs):
        rest = _under(path, folder)
        if rest is not None:
            return _join(label, rest)
    return _tail(path)


# rule 8 in free text: an absolute path of >= 2 parts (or a file:// URL) where a path starts: not after a
# name character, a URL's "//" or host ("[::1]"), "<" (a closing tag) or a label this scrubber wrote ("…/")
_ABS_TOKEN = re.compile(r"(?<![\w.~@%\]/<…$-])(?:file://)?((?:/[^\s/\"'<>&`|(){}\[\],;]+){2,})/?")
# the same for a Windows path (``C:\Users\bob\x.png``, also JSON-escaped with doubled backslashes)
_WIN_TOKEN = re.compile(r"(?<![\w\\])[A-Za-z]:((?:\\+[^\s\\/\"'<>&`|(){}\[\],;]+){2,})")


def _win_tail(m: re.Match) -> str:
    return _tail("/" + "/".join(p for p in re.split(r"\\+", m.group(1)) if p))


class PathScrubber:
    """Rewrites every occurrence of this machine's folders (runs, repository, data folder, cache, home,
    temporary folder, the runs' parents) in a rendered page to their portable names (rules 1-7 of the
    module doc), then every other absolute path token to ``…/`` + its last parts (rule 8); URLs stay.

    ``html``: the text is already-escaped HTML (a rendered page), so each inserted label is escaped;
    False for raw text that is escaped afterwards (the transcript scrubs before autoescaping).
    """

    def __init__(self, runs: dict[str, str] | None = None, *, html: bool = True):
        self.pairs = _prefixes(runs)
        self._html = html
        alts: dict[str, str] = {}
        for folder, label in self.pairs:  # the raw and the HTML-escaped spelling of each folder
            for spelled in (folder, str(escape(folder))):
                alts.setdefault(spelled, label)
        self._labels = alts
        # a folder only where a path starts (not inside a longer name or a URL's host part) and ends
        # (at "/" or a non-name character); a "file://" before it is dropped with it
        body = "|".join(re.escape(f) for f in sorted(alts, key=len, reverse=True))
        self._re = re.compile(rf"(?<![\w.~@%\]-])(?:file://)?({body})(?:(/)|(?![\w.-]))" if body else r"(?!x)x")

    def _sub(self, m: re.Match) -> str:
        label = self._labels[m.group(1)]
        if self._html:  # the page is escaped HTML: a run named "<img onerror=...>" must stay text
            label = str(escape(label))
        if m.group(2):  # "<folder>/rest": "label/rest", or "rest" for the repository
            return f"{label}/" if label else ""
        return label or "."

    def __call__(self, html: str) -> str:
        out = _ABS_TOKEN.sub(lambda m: _tail(m.group(1)), self._re.sub(self._sub, html))
        return _WIN_TOKEN.sub(_win_tail, out)


__all__ = ["CACHE_ENV", "DATA_ENV", "TMP_ENV", "PathScrubber", "display_path", "run_display"]
