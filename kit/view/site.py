"""Build the static run viewer: an index with filters, one page per episode, comparison pages
(docs/viewer.md).

The site opens from disk with no server and no network: CSS and JavaScript are inline, images are
copied beside the pages (``images/``) and referenced by relative paths. Layout of ``out``::

    index.html                          every item of every run, filters and counts, skipped lines
    episodes/<run>/<episode>.html       one page per episode record (turns, calls, events on their turn)
    images/<sha256>.<ext>               the images the episodes show or cite, copied from their workspaces
    compare-<n>.html                    one comparison (two runs, or two configurations of one run)
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined
from PIL import Image

from kit.harness.errors import ImageError
from kit.view.compare import Pair, change_counts, compare_configurations, compare_runs
from kit.view.load import NOT_IN_COPY, Item, Run, load_run, read_workspace_image, unique_labels
from kit.view.paths import PathScrubber, display_path, run_display
from kit.view.turns import turn_views
from kit.view.verdict import verdict_rows

_ENV = Environment(loader=PackageLoader("kit.view", "templates"), autoescape=True, undefined=StrictUndefined,
                   trim_blocks=True, lstrip_blocks=True)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
MARKER = ".kit-view"  # marks a folder build_site may replace
MAX_CONFIG_PAIRS = 15  # automatic configuration comparisons per run (6 configurations); more: --configs
IMAGE_MAX_SIDE = 1024  # kit: pages show images at <= 300 px; full-size PNGs made a 40-episode site 22 MB
NONE_VALUE = "(none)"  # the filter value of an empty field (an item without benchmark): "" is the "all" option
IMAGE_MAX_BYTES = 256_000  # kit: a larger image file is re-encoded as WebP too (800x600 photo PNGs of ~1 MB)


def _tri(v: bool | None, yes: str, no: str, none: str) -> str:
    return none if v is None else (yes if v else no)


def _js(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)  # shown as text (autoescaped), not embedded in a script


@dataclass
class Comparison:
    title: str
    page: str
    name_a: str
    name_b: str
    key_names: list[str]
    pairs: list[Pair]

    @property
    def counts(self) -> dict[str, int]:
        return change_counts(self.pairs)


def _image_names(it: Item) -> list[str]:
    rec = it.record
    assert rec is not None
    names = [n for m in rec.messages for n in m.image_refs()] + list(rec.cited_images)
    return list(dict.fromkeys(names))


def _shrink(data: bytes, max_side: int) -> tuple[bytes, str] | None:
    """A WebP copy of an image whose longer side exceeds ``max_side`` pixels (scaled down to it) or whose
    file exceeds :data:`IMAGE_MAX_BYTES`, else None (copied as is; also when Pillow cannot decode it:
    the browser may still show the original)."""
    if max_side <= 0:
        return None
    try:
        with Image.open(io.BytesIO(data)) as im:
            if max(im.size) <= max_side and len(data) <= IMAGE_MAX_BYTES:
                return None
            im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            buf = io.BytesIO()
            im.convert("RGBA" if im.mode in ("RGBA", "LA", "P") else "RGB").save(buf, "WEBP", quality=85)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    return buf.getvalue(), ".webp"


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _registered_sha(it: Item, name: str) -> str | None:
    """The sha256 the evidence registry recorded for image file ``name`` of the episode (None: unregistered)."""
    assert it.record is not None
    for im in it.record.images:
        if im.filename == name and _SHA256.match(im.sha256.lower()):
            return im.sha256.lower()
    return None


def _stored(folder: Path | None, stem: str) -> Path | None:
    """The site image ``<stem>.<ext>`` in ``folder`` (a regular file, not a symlink), else None."""
    if folder is None or not folder.is_dir() or folder.is_symlink():
        return None
    return next((p for p in sorted(folder.glob(stem + ".*")) if p.is_file() and not p.is_symlink()), None)


def _copy_images(it: Item, dest: Path, rel_prefix: str, max_side: int,
                 reuse: tuple[Path, ...] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """Copy the episode's shown and cited images into ``dest`` under their content hash (the same user
    image in every configuration and repeat is stored once), an image over ``max_side`` pixels or
    :data:`IMAGE_MAX_BYTES` as a smaller WebP (the page's evidence registry keeps the original's size and sha256); returns (name →
    relative src, name → reason it is not shown). Symlinks and non-regular files are refused
    (kit.images.read_regular_file), and so is every file outside the run folder
    (:func:`kit.view.load.read_workspace_image`: "image not available (outside the run)").

    Images are addressed by content (``<sha256[:24]>.<ext>`` of the original file), so an image missing
    from this copy of the run (:data:`kit.view.load.NOT_IN_COPY`: a clone has no ``workspaces/``) is taken
    from the first folder of ``reuse`` (an earlier build's ``images/``, the run's committed site) that holds
    the content its evidence-registry sha256 names; a refused path never is."""
    srcs: dict[str, str] = {}
    missing: dict[str, str] = {}
    for name in _image_names(it):
        try:
            data = read_workspace_image(it, name)  # only files that resolve inside the run folder
        except ImageError as e:
            sha = _registered_sha(it, name) if str(e).startswith(NOT_IN_COPY) else None
            old = next((f for f in (_stored(d, sha[:24]) for d in reuse) if f is not None), None) if sha else None
            if old is None:
                missing[name] = str(e)
                continue
            if _stored(dest, old.stem) is None:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(old, dest / old.name)
            srcs[name] = f"{rel_prefix}/{old.name}"
            continue
        stem = hashlib.sha256(data).hexdigest()[:24]
        stored = next((p.name for p in dest.glob(stem + ".*")), None) if dest.is_dir() else None
        if stored is None:
            small = _shrink(data, max_side)
            data, ext = small if small else (data, Path(name).suffix.lower())
            stored = stem + ext
            dest.mkdir(parents=True, exist_ok=True)
            (dest / stored).write_bytes(data)
        srcs[name] = f"{rel_prefix}/{stored}"
    return srcs, missing


def _filters(items: list[Item]) -> list[dict]:
    def vals(f) -> list[str]:
        return sorted({v for it in items for v in f(it)})

    return [
        {"label": "run", "attr": "run", "multi": False, "values": vals(lambda i: [i.run])},
        {"label": "status", "attr": "status", "multi": False, "values": vals(lambda i: [i.status])},
        {"label": "benchmark", "attr": "benchmark", "multi": False, "values": vals(lambda i: [i.benchmark])},
        {"label": "configuration", "attr": "config", "multi": False, "values": vals(lambda i: [i.configuration])},
        {"label": "event type", "attr": "events", "multi": True, "values": vals(lambda i: i.event_types)},
        {"label": "verdict", "attr": "correct", "multi": False, "values": vals(lambda i: [i.verdict.label])},
        {"label": "cited-image match", "attr": "match", "multi": False,
         "values": vals(lambda i: [_tri(i.match, "match", "no match", "n/a")])},
    ]


def _counts(items: list[Item]) -> dict[str, dict[str, int]]:
    out = {
        "status": Counter(i.status for i in items),
        "configuration": Counter(i.configuration for i in items),
        "verdict": Counter(i.verdict.label for i in items),
        "cited-image match": Counter(_tri(i.match, "match", "no match", "n/a") for i in items),
        "events (episodes with)": Counter(t for i in items for t in i.event_types),
    }
    return {k: dict(sorted(v.items())) for k, v in out.items() if v}


_SITE_TOP = re.compile(r"^(index\.html|compare-\d+\.html|episodes|images|" + re.escape(MARKER) + ")$")


def _site_stray(out: Path) -> str | None:
    """The first path under ``out`` that :func:`build_site` does not write (None: only a site's files).
    Layout: :data:`MARKER`, ``index.html``, ``compare-<n>.html``, ``episodes/<n>/<page>.html``, ``images/<file>``."""
    for p in sorted(out.iterdir()):
        if not _SITE_TOP.match(p.name) or p.is_symlink() or p.is_dir() != (p.name in ("episodes", "images")):
            return p.name
    for p in sorted((out / "images").iterdir()) if (out / "images").is_dir() else []:
        if p.is_symlink() or not p.is_file():
            return f"images/{p.name}"
    for sub in sorted((out / "episodes").iterdir()) if (out / "episodes").is_dir() else []:
        if sub.is_symlink() or not sub.is_dir() or not sub.name.isdigit():
            return f"episodes/{sub.name}"
        for p in sorted(sub.iterdir()):
            if p.is_symlink() or not p.is_file() or p.suffix != ".html":
                return f"episodes/{sub.name}/{p.name}"
    return None


def _check_out(out: Path, runs: list[Path]) -> bool:
    """Refuse a site folder that would replace a run: ``out`` must not be a file, a run folder or a parent
    of one, and an earlier site may be replaced only if it holds nothing but a site's files (a planted
    :data:`MARKER` does not make a run folder's data replaceable). True: ``out`` is an earlier site to replace.

    Raises:
        ValueError: with the reason.
    """
    if out.is_symlink():  # replacing it would follow the link (or fail half-way)
        raise ValueError(f"-o {str(out)!r} is a symlink: give the real folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"-o {str(out)!r} is not a folder (an existing file): choose a folder for the site")
    real = out.resolve()
    for d in runs:
        rd = d.resolve()
        if real == rd or real in rd.parents:
            raise ValueError(f"-o {str(out)!r} is the run folder {str(d)!r} or one of its parents: the site would "
                             f"replace the run; choose another -o (default: RUN_DIR/view)")
    if not out.exists() or not any(out.iterdir()):
        return False
    if not (out / MARKER).is_file():  # never delete a folder this builder did not write
        raise ValueError(f"{str(out)!r} is not empty and is not a viewer site ({MARKER} missing): choose another -o")
    stray = _site_stray(out)
    if stray is not None:
        raise ValueError(f"{str(out)!r} has {MARKER} but holds {stray!r}, which the viewer does not write (part of "
                         f"a run folder?): not replaced; choose another -o")
    return True


def build_site(run_dirs: list[str | Path], out: str | Path, *, configs: tuple[str, str] | None = None,
               title: str | None = None, image_max_side: int = IMAGE_MAX_SIDE) -> Path:
    """Write the viewer for one or two run folders into ``out`` and return the path of ``index.html``.

    With two run folders, a comparison of run A vs run B (items matched by benchmark, configuration,
    episode id and repeat). Inside each run, ``configs=(A, B)`` compares those two configurations;
    without it, every pair of configurations of an evaluation run (configuration from its
    ``runs/<benchmark>/<config>/`` layout or ``config:`` labels) is compared, up to
    :data:`MAX_CONFIG_PAIRS`. Images whose longer side exceeds ``image_max_side`` pixels (or whose file
    exceeds :data:`IMAGE_MAX_BYTES`) are stored as smaller WebP copies (0: every image byte for byte).

    Raises:
        kit.view.load.ViewError: a run folder is missing or holds no ``episodes.jsonl``.
        ValueError: ``out`` is a file or a symlink, a run folder or one of its parents, a non-empty folder this builder
            did not write (or one holding files a site does not have), more than two run folders,
            an unknown configuration in ``configs``, or two items with the same comparison key.
    """
    dirs = [Path(d) for d in run_dirs]
    if not 1 <= len(dirs) <= 2:
        raise ValueError(f"view takes one or two run folders, got {len(dirs)}")
    runs: list[Run] = [load_run(d, lab) for d, lab in zip(dirs, unique_labels(dirs), strict=True)]
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="kit-view-images-") as keep:
        kept = None
        if _check_out(out, dirs):
            if (out / "images").is_dir():  # kept aside: a clone's rebuild takes its images from here
                kept = Path(shutil.copytree(out / "images", Path(keep) / "images"))
            shutil.rmtree(out)  # rebuilt from scratch so no page of an earlier build lingers
        # the committed site of each run (RUN_DIR/view, kit.view.run_view) is the other content store
        reuse = tuple(p for p in [kept, *(d / "view" / "images" for d in dirs)] if p is not None)
        return _build(runs, out, configs, title, image_max_side, reuse)


def _build(runs: list[Run], out: Path, configs: tuple[str, str] | None, title: str | None, image_max_side: int,
           reuse: tuple[Path, ...]) -> Path:
    """:func:`build_site` after ``out`` was checked and emptied; ``reuse``: see :func:`_copy_images`."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a parent is a file, no permission
        raise ValueError(f"cannot create the site folder {str(out)!r}: {e.strerror or e}") from e
    (out / MARKER).write_text("written by kit.view.build_site; the folder is replaced on the next build\n")
    # no page names this machine's folders: runs by their display name, local paths portably (kit.view.paths)
    names = {str(r.root): run_display(r.root) for r in runs}
    scrub = PathScrubber(names)

    def shown(p: str | None) -> str:
        return display_path(p, names)

    for ri, run in enumerate(runs):
        taken: set[str] = set()
        for it in run.items:
            if it.record is None:
                continue
            slug = _SAFE.sub("_", f"{it.source}__{it.episode_id}").strip("_.") or "episode"
            base, n = slug, 2
            while slug in taken:
                slug, n = f"{base}-{n}", n + 1
            taken.add(slug)
            it.page = f"episodes/{ri}/{slug}.html"
            srcs, missing = _copy_images(it, out / "images", "../../images", image_max_side, reuse)
            html = _ENV.get_template("episode.jinja").render(
                r=it.record, it=it, turns=turn_views(it.record), src=srcs.get, missing=missing,
                index="../../index.html", js=_js, path=shown)
            page = out / it.page
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(scrub(html), encoding="utf-8")
    comparisons: list[Comparison] = []
    if len(runs) == 2:
        comparisons.append(Comparison(f"{runs[0].label} vs {runs[1].label}", "", runs[0].label, runs[1].label,
                                      ["benchmark", "configuration", "episode", "repeat"],
                                      compare_runs(runs[0].items, runs[1].items)))
    for run in runs:
        judged = {i.configuration for i in run.items if i.prediction is not None or
                  (i.record is not None and any(lab.startswith("config:") for lab in i.record.labels))}
        if configs is not None:
            pairs_of = [configs]
        else:
            pairs_of = list(combinations(sorted(judged), 2))[:MAX_CONFIG_PAIRS]
        for ca, cb in pairs_of:
            comparisons.append(Comparison(f"{run.label}: {ca} vs {cb}", "", ca, cb,
                                          ["run", "benchmark", "episode", "repeat"],
                                          compare_configurations(run.items, ca, cb)))
    for n, c in enumerate(comparisons, 1):
        c.page = f"compare-{n}.html"
        (out / c.page).write_text(scrub(_ENV.get_template("compare.jinja").render(
            title=c.title, pairs=c.pairs, counts=c.counts, key_names=c.key_names, name_a=c.name_a, name_b=c.name_b)),
            encoding="utf-8")
    items = [it for r in runs for it in r.items]
    index = out / "index.html"
    index.write_text(scrub(_ENV.get_template("index.jinja").render(
        title=title or "Run viewer: " + " vs ".join(r.label for r in runs), runs=runs, rows=items,
        filters=_filters(items), counts=_counts(items), comparisons=comparisons, tri=_tri, where=names,
        verdicts=verdict_rows(items),
        none_value=NONE_VALUE)),
        encoding="utf-8")
    return index


__all__ = ["IMAGE_MAX_SIDE", "MAX_CONFIG_PAIRS", "NONE_VALUE", "Comparison", "build_site"]
