"""Decorative images of the local web (issue 27, part 1): interface images that carry no evidence
(user avatars and identicons, reputation badges, profile flags, sprites, spinners, icons, book
ornaments), decided by path, size, aspect and role on every archive family the kit reads
(mwoffliner Wikipedia / Wikibooks layouts of several years, StackExchange by sotoki, Gutenberg).

A decorative image is never indexed (text or reverse search), never returned as a page image and
so never cited. Three tests, any one suffices:

* **size and aspect** (:func:`kit.web.text_clean.is_decorative_image`): under 50 px on the long
  side or 16 px on the short one, or banner-shaped (over 8:1 with the short side under 64 px:
  rules, separators, sprite strips); plus that function's interface file names (file-type icons,
  icon sets, maintenance symbols, identicons, spinners);
* **path** (:func:`decorative_path`): a folder of the entry path that holds interface images
  (:data:`DECORATIVE_FOLDERS`: StackExchange's ``users/profiles/<id>.webp`` avatars, any
  ``avatars/``, ``badges/``, ``flags/``, ``sprites/``, ``icons/`` folder, the archives' own skin
  and asset folders ``-/``, ``_res_/``, ``_mw_/``, ``_assets_/``, ``static/``, and legacy
  mwoffliner's style-image folder ``I/s/`` beside its media folder ``I/m/``), or a file name of
  :data:`DECORATIVE_NAME` (avatars, gravatars, sprites, favicons, Gutenberg drop caps and
  ornaments, Wikibooks' progress icons ``75%.svg``);
* **role** (:func:`decorative_role`): how the page shows the ``<img>``: a class of the image or of
  one of its 3 nearest ancestors in :data:`DECORATIVE_CLASSES` (sotoki's ``s-avatar`` and
  ``s-user-card``, Stack Overflow's ``gravatar-wrapper-32``, ``badge1``, ``flag``; ``sprite``,
  ``spinner``), a class of :data:`ICON_CLASSES` on an image shown at most 120 px (MediaWiki's
  ``noviewer`` — the class MediaWiki gives icons it keeps out of its media viewer —,
  ``flagicon``, ``mbox-image``, ``side-box-image``, ``icon``), a ``role="presentation"`` /
  ``aria-hidden="true"`` image, or a jdenticon placeholder (``data-jdenticon-value``).

Content photos stay: Wikipedia keeps its files flat under ``I/`` (``I/m/``, ``I/s/`` in legacy
layouts), sotoki keeps post images under ``images/``, Gutenberg under ``<book id>/`` folders; a
flag or logo that is an article's subject is shown at content size without an icon class.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

import lxml.html

from kit.web.text_clean import _file_name, is_decorative_image

#: Folder names (any folder of an entry path, case-insensitive) whose images are interface, not
#: content. ``users``/``user``: StackExchange keeps its avatars (and gravatar identicons) in
#: ``users/profiles/``; ``-``, ``_res_``, ``_mw_``, ``_assets_``, ``static``, ``skins``: the
#: layout and skin assets of mwoffliner (legacy and new namespaces), Gutenberg and sotoki.
DECORATIVE_FOLDERS = frozenset({
    "users", "user", "profiles", "avatars", "avatar", "gravatar", "gravatars", "identicons",
    "identicon", "badges", "badge", "flags", "sprites", "sprite", "icons", "icon", "emoji",
    "emojis", "smilies", "smileys", "spinners", "-", "_res_", "_mw_", "_assets_", "static",
    "skins", "skin",
})
#: File names (thumbnail prefix and extensions removed, case-insensitive) of interface images not
#: in :data:`kit.web.text_clean.DECORATIVE_NAME`: avatars, gravatars, sprites, favicons, user
#: badges; Gutenberg drop caps, head- and tailpieces, ornaments; Wikibooks' development-stage
#: icons (``00%``, ``25%``, ... ``100%``, ``100 percent``).
DECORATIVE_NAME = re.compile(
    r"(^|[_ .-])(avatar|gravatar|sprite|sprites|favicon)s?([_ .-]|\d|$)|^default[_ -]?user|"
    r"^(dropcap|drop[_ -]cap|tailpiece|headpiece|ornament|fleuron|deco)[_ -]?\d*[a-z]?$|"
    r"^\d{1,3}([%]|[_ ]?percent)$",
    re.I,
)
#: Classes (of the ``<img>`` or one of its 3 nearest ancestors) of interface images, whatever
#: their size.
DECORATIVE_CLASSES = frozenset({
    # StackExchange (sotoki, and Stack Overflow's own markup)
    "s-avatar", "s-avatar--image", "s-user-card", "s-user-card--avatar", "s-user-card--awards",
    "avatar", "gravatar", "gravatar-wrapper-24", "gravatar-wrapper-32", "gravatar-wrapper-48",
    "gravatar-wrapper-64", "gravatar-wrapper-128", "user-gravatar32", "user-gravatar48",
    "user-gravatar64", "user-gravatar128", "user-info", "user-details", "user-card", "identicon",
    "badge", "badge1", "badge2", "badge3", "badgecount", "s-badge", "s-award-bling", "flag",
    "user-flag", "profile-flag", "sprite", "spinner", "loader",
})
#: Classes that mark an icon when the ``<img>`` is shown at most :data:`ICON_MAX_SIDE` px (or
#: without a size): MediaWiki's ``noviewer`` (icons kept out of its media viewer; also the
#: 280 px base map of a location map, which is content), ``flagicon``, message-box and side-box
#: images, French portal-banner icons, generic ``icon``.
ICON_CLASSES = frozenset({
    "noviewer", "flagicon", "mbox-image", "ambox-image", "side-box-image",
    "bandeau-portail-icone", "mw-file-icon", "icon",
})
ICON_MAX_SIDE = 120
_ROLE_DEPTH = 3  # ancestors of an <img> whose classes count


def _shown_side(img: lxml.etree._Element) -> int | None:
    """The longer of the ``<img>``'s ``width``/``height`` attributes in px, ``None`` if absent."""
    sides = []
    for name in ("width", "height"):
        value = (img.get(name) or "").strip().removesuffix("px")
        if value.isdigit():
            sides.append(int(value))
    return max(sides) if sides else None


def decorative_path(path: str | None) -> bool:
    """True when ``path``'s folders or file name mark an interface image (see the module)."""
    if not path:
        return False
    folders = unquote(path).lower().split("/")[:-1]
    if any(f in DECORATIVE_FOLDERS for f in folders) or folders[:2] == ["i", "s"]:
        return True
    return bool(DECORATIVE_NAME.search(_file_name(posixpath.basename(path))))


def decorative_role(img: lxml.etree._Element) -> bool:
    """True when the page shows ``img`` as interface (class, ARIA role, identicon placeholder)."""
    if (img.get("role") or "").strip().lower() == "presentation" \
            or (img.get("aria-hidden") or "").strip().lower() == "true" \
            or img.get("data-jdenticon-value") is not None:
        return True
    shown = _shown_side(img)
    icon_sized = shown is None or shown <= ICON_MAX_SIDE
    node: lxml.etree._Element | None = img
    for _ in range(_ROLE_DEPTH + 1):
        if node is None or not isinstance(node.tag, str):
            return False
        classes = node.get("class")
        if classes:
            names = classes.lower().split()
            if not DECORATIVE_CLASSES.isdisjoint(names) \
                    or (icon_sized and not ICON_CLASSES.isdisjoint(names)):
                return True
        node = node.getparent()
    return False


def is_decorative(path: str | None, width: int, height: int) -> bool:
    """True for an image that is decoration by size, aspect or path (the role, a property of one
    ``<img>`` on one page, is :func:`decorative_role`). ``path`` may be ``None`` (a query
    image: size and aspect only)."""
    return is_decorative_image(path, width, height) or decorative_path(path)
