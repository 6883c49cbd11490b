"""Shape of the local-web package kit/web/zim/ (issue 15 part 5): one module per concern, none a
giant, the old ``from kit.web.zim import X`` names still there, and the names tests patch being the
objects the code reads. Needs no ZIM archive."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import kit.web.zim as zim

PKG_DIR = Path(zim.__file__).parent
#: Every name callers import from kit.web.zim (kit/, tests/, notebooks/, benchmarks/), public or not.
USED_BY_CALLERS = {"LocalZimWeb", "ZimError", "MATCH_DISTANCE", "image_hashes", "text_analyzer",
                   "SNIPPET_CHARS", "MIN_IMAGE_LONG_SIDE", "RASTER_MIMES", "_ZimArchive",
                   "_Collection", "_is_decorative"}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(PKG_DIR)]))


def test_is_a_package_of_small_modules():
    assert PKG_DIR.name == "zim" and (PKG_DIR / "__init__.py").is_file()
    assert {"html", "snippets", "images", "archive", "index", "markdown", "backend"} <= set(_modules())
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PKG_DIR.glob("*.py")}
    assert max(sizes.values()) <= 600, sizes
    for name in _modules():  # each says what it is for
        assert (importlib.import_module(f"kit.web.zim.{name}").__doc__ or "").strip(), name


def test_old_import_paths_still_resolve():
    for name in zim.__all__:
        assert getattr(zim, name) is not None, name
    assert len(zim.__all__) == len(set(zim.__all__))
    missing = {n for n in USED_BY_CALLERS if not hasattr(zim, n)}
    assert not missing
    assert zim.INDEX_FORMAT == 15  # 5: on-disk stores; 6: zstd text; 7: blocks; 8: page titles; 9: folding, aliases,
    # decorative roles; 10: UTF-8 without a declared charset, lead-first occurrence samples; 11: body prefixes + tails;
    # 12: image hashes resampled with a reducing gap; 13: the noise cut before parsing; 14: JPEG luminance decoded alone for hashing;
    # 15: folders named by the archive's key (ZIM UUID, stored MD5, size), its sha256 hashed during the build


def test_re_exports_are_the_objects_the_code_reads():
    from kit.web.zim import archive, backend, images, index

    # monkeypatch.setattr(zim._ZimArchive, "build", ...) must reach the class the backend builds.
    assert zim._ZimArchive is archive._ZimArchive is backend._ZimArchive
    assert zim._Collection is index._Collection is backend._Collection
    assert zim.MATCH_DISTANCE is images.MATCH_DISTANCE is backend.MATCH_DISTANCE
    assert zim.decode_image is images.decode_image  # the RGB decode; query_image and the build use decode_grey
    assert backend.query_image is images.query_image
