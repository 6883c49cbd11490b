"""Decorative images by path, size, aspect and role on every archive family the kit reads (issue 27,
part 1): StackExchange (sotoki: avatars under ``users/profiles/``, identicon placeholders, badge
and flag images in user cards), Gutenberg (drop caps, tailpieces, reader assets), Wikibooks
(mwoffliner layout: progress icons, side-box logos), legacy mwoffliner (``I/s/`` style images) —
archives written here with ``libzim.writer`` in those layouts — and the shared Wikipedia
archives, checked against the hand-labelled sample in
``tests/fixtures/zim_decorative_labels.json``. A decorative image is never indexed, returned by
image or reverse search, nor shown as a fetched page's image."""

from __future__ import annotations

import io
import json
from pathlib import Path

import libzim.writer
import lxml.html
import pytest
from conftest import ZimItem as _Item
from PIL import Image, ImageDraw

from kit.web.zim import LocalZimWeb
from kit.web.zim import build as build_mod
from kit.web.zim.decorative import decorative_role, is_decorative

LABELS = Path(__file__).parent / "fixtures" / "zim_decorative_labels.json"


def picture(seed: int, size: tuple[int, int], fmt: str = "WEBP") -> bytes:
    """A distinct picture (shapes on a coloured ground: distinct perceptual hashes per seed)."""
    img = Image.new("RGB", size, ((seed * 67) % 256, (seed * 131) % 256, (seed * 29) % 256))
    draw = ImageDraw.Draw(img)
    w, h = size
    for k in range(6):
        x, y = (seed * 37 + k * 53) % w, (seed * 91 + k * 71) % h
        draw.ellipse((x, y, x + w // 3, y + h // 4), fill=((k * 90 + seed) % 256, 40 * k % 256, 200))
        draw.rectangle((w - x - w // 5, h - y - h // 6, w - x, h - y), fill=(20 * k, 255 - seed % 256, 90))
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def _write(path: Path, language: str, items: list[_Item]) -> Path:
    creator = libzim.writer.Creator(str(path)).config_indexing(False, language).config_compression(
        libzim.writer.Compression.none)
    with creator:
        creator.add_metadata("Language", language)
        for it in items:
            creator.add_item(it)
    return path


def _page(title: str, body: str) -> str:
    return (f"<html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body>{body}</body></html>")


USERS = 10


def stackexchange_archive(path: Path) -> Path:
    """A sotoki-layout site about beekeeping: 10 questions, each with a content photo under
    ``images/`` and the cards of its asker and answerers (avatar ``users/profiles/<id>.webp``,
    128 x 128, with sotoki's ``s-avatar`` classes and jdenticon placeholder; an old-style
    gravatar card with a badge image and a profile flag), plus 10 user pages."""
    items = []

    def card(uid: int) -> str:
        return (f'<div class="s-user-card"><a class="s-avatar s-avatar__32 s-user-card--avatar" '
                f'href="../../users/{uid}/user{uid}"><img class="s-avatar--image" '
                f'src="../../users/profiles/{uid}.webp" data-jdenticon-value="beekeeper {uid}"/></a>'
                f'<div class="s-user-card--info"><a href="../../users/{uid}/user{uid}">beekeeper {uid}'
                f'</a></div></div>'
                f'<div class="user-info"><div class="user-gravatar32"><img src="../../avatars/g{uid}.png" '
                f'alt="beekeeper {uid}"/></div><span class="badge1"><img src="../../badges/gold.png" '
                f'alt="beekeeping gold badge"/></span><img class="flag" src="../../flags/fr.png" '
                f'alt="beekeeper flag"/></div>')

    for q in range(10):
        body = (f"<h1>How do I keep my beekeeping hive {q} healthy?</h1>"
                f"<div class='question'><p>My beekeeping hive number {q} has fewer honey bees "
                f"every week; the beekeeping frames look like this.</p>"
                f"<p><img src='../../images/{1000 + q}.webp' alt='beekeeping hive frame {q}'/></p>"
                f"{card(q % USERS)}</div><div class='answer'><p>Beekeeping answer: check the queen "
                f"of hive {q} and the varroa mites.</p>{card((q + 3) % USERS)}</div>")
        items.append(_Item(f"questions/{q}/beekeeping-hive-{q}", f"Beekeeping hive {q}", "text/html",
                           _page(f"Beekeeping hive {q}", body)))
        items.append(_Item(f"images/{1000 + q}.webp", "", "image/webp", picture(q, (400, 300))))
    for uid in range(USERS):
        body = (f"<h1>User beekeeper {uid}</h1><div class='s-avatar s-avatar__128'><img "
                f"class='s-avatar--image' src='../../users/profiles/{uid}.webp' "
                f"alt='beekeeper {uid} beekeeping'/></div><p>Beekeeping enthusiast number {uid}.</p>")
        items.append(_Item(f"users/{uid}/user{uid}", f"User beekeeper {uid}", "text/html",
                           _page(f"User beekeeper {uid}", body)))
        items.append(_Item(f"users/profiles/{uid}.webp", "", "image/webp",
                           picture(100 + uid, (128, 128))))
        items.append(_Item(f"avatars/g{uid}.png", "", "image/png",
                           picture(200 + uid, (64, 64), "PNG")))
    items.append(_Item("badges/gold.png", "", "image/png", picture(300, (64, 64), "PNG")))
    items.append(_Item("flags/fr.png", "", "image/png", picture(301, (64, 64), "PNG")))
    return _write(path, "eng", items)


def gutenberg_archive(path: Path) -> Path:
    """A Gutenberg-layout book: illustrations under ``<id>/images/``, a drop cap (``dropcap``
    class), a tailpiece and an ornament by name, a reader icon under ``_assets_/``."""
    body = ("<h1>The Bee Keeper's Manual</h1>"
            "<p><img class='dropcap' src='1234/images/dropcap-t.jpg' alt='T' width='80'/>he bee "
            "keeper's manual describes the hive, the queen and the swarm.</p>"
            "<div class='figcenter'><img src='1234/images/illus-hive.jpg' alt='A straw hive'/>"
            "<p class='caption'>A straw hive of the old fashion</p></div>"
            "<p>The swarm leaves the hive in May.</p>"
            "<div class='figcenter'><img src='1234/images/illus-swarm.jpg' alt='A swarm'/></div>"
            "<p><img src='1234/images/tailpiece.jpg' alt=''/></p>"
            "<p><img src='1234/images/ornament2.jpg' alt=''/></p>"
            "<p><img src='_assets_/home-icon.png' alt='home'/></p>")
    items = [
        _Item("The_Bee_Keepers_Manual.1234.html", "The Bee Keeper's Manual", "text/html",
              _page("The Bee Keeper's Manual", body)),
        _Item("1234/images/dropcap-t.jpg", "", "image/jpeg", picture(400, (90, 90), "JPEG")),
        _Item("1234/images/illus-hive.jpg", "", "image/jpeg", picture(401, (500, 400), "JPEG")),
        _Item("1234/images/illus-swarm.jpg", "", "image/jpeg", picture(402, (500, 380), "JPEG")),
        _Item("1234/images/tailpiece.jpg", "", "image/jpeg", picture(403, (240, 90), "JPEG")),
        _Item("1234/images/ornament2.jpg", "", "image/jpeg", picture(404, (200, 100), "JPEG")),
        _Item("_assets_/home-icon.png", "", "image/png", picture(405, (64, 64), "PNG")),
    ]
    return _write(path, "eng", items)


def wikibooks_archive(path: Path) -> Path:
    """A Wikibooks page in mwoffliner's layout: a content photo, the book's development-stage icon
    (``75%.svg.png``), a side-box logo (``noviewer``, 60 px) and a location-style map shown at
    280 px under ``noviewer`` (content)."""
    body = ("<h1>Cookbook:Bread</h1><div id='mw-content-text'>"
            "<p><img src='../I/75%25.svg.png.webp' alt='75% developed' width='60' height='60'/> "
            "Bread is a staple food prepared from a dough of flour and water.</p>"
            "<figure><img src='../I/Bread_loaf.jpg.webp' alt='A bread loaf' width='300'/>"
            "<figcaption>A loaf of bread</figcaption></figure>"
            "<div class='side-box'><span class='noviewer'><img src='../I/Wikipedia-logo.png.webp' "
            "width='60' height='60' alt='bread'/></span>Wikipedia has an article about bread.</div>"
            "<div><span class='noviewer'><img src='../I/Bread_regions_map.png.webp' width='280' "
            "height='300' alt='bread regions map'/></span></div></div>")
    items = [
        _Item("A/Cookbook:Bread", "Cookbook:Bread", "text/html", _page("Cookbook:Bread", body)),
        _Item("I/75%.svg.png.webp", "", "image/webp", picture(500, (64, 64))),
        _Item("I/Bread_loaf.jpg.webp", "", "image/webp", picture(501, (300, 220))),
        _Item("I/Wikipedia-logo.png.webp", "", "image/webp", picture(502, (64, 64))),
        _Item("I/Bread_regions_map.png.webp", "", "image/webp", picture(503, (280, 300))),
    ]
    return _write(path, "eng", items)


@pytest.fixture(autouse=True)
def inline_build(monkeypatch):
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, LocalZimWeb]:
    d = tmp_path_factory.mktemp("families")
    out = {}
    for name, writer in (("stackexchange", stackexchange_archive), ("gutenberg", gutenberg_archive),
                         ("wikibooks", wikibooks_archive)):
        out[name] = LocalZimWeb([writer(d / f"{name}.zim")], index_dir=d / f"idx_{name}")
        out[name].ensure_ready()
    return out


def _indexed(web: LocalZimWeb) -> set[str]:
    return {rec.path for arch in web.archives for rec in arch.images}


def test_stackexchange_image_search_returns_content_not_avatars(families):
    web = families["stackexchange"]
    assert _indexed(web) == {f"images/{1000 + q}.webp" for q in range(10)}
    hits = web.image_search_sync("beekeeping", 10)
    assert len(hits) == 10
    assert all("/images/" in h.image_url for h in hits), [h.image_url for h in hits]
    for q in ("beekeeper", "beekeeping gold badge", "beekeeper flag", "user beekeeper 3"):
        assert all("/images/" in h.image_url for h in web.image_search_sync(q, 10)), q


def test_stackexchange_fetch_and_reverse_search_skip_avatars(families, tmp_path):
    web = families["stackexchange"]
    page = web.fetch_sync("zim://stackexchange/questions/2/beekeeping-hive-2")
    assert [i.image_url for i in page.images] == ["zim://stackexchange/images/1002.webp"]
    user = web.fetch_sync("zim://stackexchange/users/2/user2")
    assert user.images == []
    res = web.reverse_image_search_sync(picture(102, (128, 128)), 5)  # avatar of user 2
    assert res.pages == [] and res.thumbnails == []


def test_gutenberg_keeps_illustrations_only(families):
    web = families["gutenberg"]
    assert _indexed(web) == {"1234/images/illus-hive.jpg", "1234/images/illus-swarm.jpg"}
    page = web.fetch_sync("zim://gutenberg/The_Bee_Keepers_Manual.1234.html")
    assert [i.image_url.rsplit("/", 1)[1] for i in page.images] == ["illus-hive.jpg",
                                                                     "illus-swarm.jpg"]


def test_wikibooks_drops_progress_icons_and_side_box_logos(families):
    web = families["wikibooks"]
    assert _indexed(web) == {"I/Bread_loaf.jpg.webp", "I/Bread_regions_map.png.webp"}


PATHS = [
    ("users/profiles/12.webp", (128, 128), True),       # sotoki avatar
    ("I/users/12.png", (128, 128), True),               # an older user-image folder
    ("badges/gold.png", (64, 64), True),
    ("flags/fr.png", (64, 64), True),
    ("static/img/sprites.png", (400, 40), True),
    ("_res_/spinner.gif", (64, 64), True),
    ("I/s/Picto_infobox_chateau.png", (120, 45), True),  # legacy mwoffliner style image
    ("I/Default_user_avatar.png", (200, 200), True),
    ("I/75%25.svg.png.webp", (64, 64), True),
    ("1234/images/tailpiece.jpg", (240, 90), True),
    ("images/1002.webp", (400, 300), False),             # sotoki post image
    ("I/m/Flag_of_Germany.svg.png", (220, 132), False),  # a flag article's subject
    ("I/Apple_logo_black.svg.png.webp", (220, 260), False),
    ("I/Ray_Charles_classic_piano_pose.jpg.webp", (500, 589), False),
    ("1234/images/illus-hive.jpg", (500, 400), False),
]


def test_path_size_aspect_rule():
    assert [p for p, size, want in PATHS if is_decorative(p, *size) is not want] == []


ROLES = [
    ('<div class="s-user-card"><a class="s-avatar"><img src="u.webp"/></a></div>', True),
    ('<div class="user-gravatar32"><img src="g.png"/></div>', True),
    ('<span class="badge2"><img src="b.png"/></span>', True),
    ('<img class="flag" src="f.png"/>', True),
    ('<img src="x.png" data-jdenticon-value="bob"/>', True),
    ('<img src="x.png" role="presentation"/>', True),
    ('<span class="noviewer"><img src="i.png" width="16" height="16"/></span>', True),
    ('<span class="noviewer"><img src="m.png" width="280" height="433"/></span>', False),
    ('<figure><img src="p.jpg" width="300"/></figure>', False),
]


def test_role_rule():
    for html, want in ROLES:
        img = next(lxml.html.fromstring(f"<div>{html}</div>").iter("img"))
        assert decorative_role(img) is want, html


SHARED = {"wikipedia-2023": "wikipedia_en_ray_charles_maxi_2023-09",
          "wikipedia-2015": "wikipedia_en_ray_charles_2015-06",
          "wikipedia-fr-2017": "wikipedia_fr_test_2017-07"}


def test_labelled_sample_of_every_family(families, data_dir, tmp_path):
    """The hand-labelled sample (every raster image the shared archives' articles show, and the
    generated families' images): content images are indexed, decorative ones are not."""
    rows = json.loads(LABELS.read_text(encoding="utf-8"))["images"]
    assert len(rows) >= 100
    assert set(SHARED) | {"stackexchange", "gutenberg", "wikibooks"} <= {r["family"] for r in rows}
    paths = [data_dir / "zim" / f"{stem}.zim" for stem in SHARED.values()]
    if not all(p.is_file() for p in paths):
        pytest.skip("shared archives missing")
    shared = LocalZimWeb(paths, index_dir=tmp_path / "idx")
    shared.ensure_ready()
    indexed = {fam: _indexed(web) for fam, web in families.items()}
    for fam, stem in SHARED.items():
        indexed[fam] = {rec.path for rec in shared._archive(stem).images}
    wrong = [r for r in rows if (r["path"] in indexed[r["family"]]) != (r["label"] == "content")]
    assert not wrong, wrong[:5]
