"""Characterization of :meth:`kit.vfold.render.Renderer.layout` (issue 30, part 7): a varied set of
texts (long prose, CJK and URL runs wider than a line, right-to-left and shaped scripts, control
characters, tables, image placeholders, newline runs, empty text) laid out under several configs;
each layout (every line's span, drawn glyphs, width and path; page sizes; end) is pinned as a sha256,
and the PNG bytes of the rendered pages too (rendering is deterministic for a font set and Pillow
build; the fixture records both and the PNG check is skipped on another). Generated from the code
before ``layout`` was split into steps; regenerate it (only for an intended change) with
``python tests/test_characterize_layout.py --write``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "vfold_layout_fingerprints.json"

_PROSE = ("The Lovell Telescope is a radio telescope at Jodrell Bank Observatory, near Goostrey, Cheshire, in the "
          "north-west of England. When construction was finished in 1957, the telescope was the largest steerable "
          "dish radio telescope in the world at 76.2 m (250 ft) in diameter. ")
_URL = "https://en.wikipedia.org/w/index.php?title=Jodrell_Bank_Observatory&oldid=1179012345&action=raw&section=2#History"
_CJK = "焦德尔班克天文台位于英国柴郡，是曼彻斯特大学的射电天文台。" * 12
TEXTS: dict[str, str] = {
    "empty": "",
    "one_word": "Hello",
    "short": "Hello, world.",
    "spaces_only": "      \t   ",
    "prose": _PROSE * 3,
    "long_prose": (_PROSE * 4 + "\n\n") * 30,
    "very_long": ("lorem ipsum dolor sit amet " * 40 + "\n") * 120,
    "cjk": _CJK,
    "cjk_mixed": "Title: 長い日本語の文章と English words 混在 " * 20 + "한국어 문장도 있습니다. " * 10,
    "url": f"See {_URL} and {_URL * 3} then more.",
    "url_trailing_spaces": _URL * 4 + "      \nnext",
    "long_word_no_breaks": "a" * 700 + " tail",
    "rtl": "שלום עולם " * 20 + "مرحبا بالعالم " * 20 + "\n" + "ltr then עברית then back " * 5,
    "shaped": "नमस्ते दुनिया " * 15 + "สวัสดีชาวโลก " * 10 + "e\u0301 cafe\u0301 " * 10,
    "controls": "nul\x00 bell\x07 esc\x1b[31m del\x7f c1\x85\x9f bom\ufeff nonchar\ufdd0\U0010ffff lone\ud800 end",
    "tabs": "col1\tcol2\tcol3\n" + "a\tbb\tccc\n" * 8 + "\t\tdeep\t\n",
    "markdown_table": ("| Name | Year | Diameter |\n|------|------|----------|\n"
                       + "| Lovell | 1957 | 76.2 m |\n| Mark II | 1964 | 38 m × 25 m |\n" * 10),
    "wide_table": "| " + " | ".join(f"column_{i}_with_a_long_header" for i in range(12)) + " |\n" + "|---" * 12 + "|\n",
    "images": ("Results:\n1. image: <|vision_start|><|image_pad|><|vision_end|>\ntitle: Lovell\n"
               "<IMG: page_image_1.jpg> ![Lovell Telescope](https://upload.wikimedia.org/x/Lovell.jpg)\n") * 6,
    "newlines": "\n\nstart\n\n\nthree\n\nnext\nsingle\n" + "\n" * 6 + "end\n",
    "only_newlines": "\n" * 40,
    "newline_at_width": ("x" * 95 + "\n") * 20,
    "emoji_missing": "smile 😀 rocket 🚀 " * 10 + "\U000e0100 tag \U0001fbf0",
    "over_max_pages": "word " * 40000,
    "wide_escapes": "ab " + "\U0010ffff" * 5 + " cd " + "\x00" * 50 + " e \U0010ffff",
    "long_word_trailing_spaces": "x" * 300 + " " * 200 + "y",
    "words_then_spaces": "".join("m" * k + " " * 30 for k in range(1, 40)),
    "ragged_lines": "".join("m" * k + "\n" for k in range(1, 60)),
    "ragged_words": " ".join("w" * k for k in range(1, 80)),
    "grow_with_spaces": "".join(f"a {'m' * k}{' ' * 40}" for k in range(1, 14)),
    "escape_late": "".join(f"{'i' * k} ab " + "\U0010ffff" * 2 + " " for k in range(1, 12)),
    **{f"next_line_spaces_{k}": "a " + "m" * k + " " * 40 + "z" for k in (3, 4, 5, 6, 8)},
    "mixed_everything": _PROSE + "\n" + _CJK[:60] + "\t" + _URL + "\n\n" + "مرحبا" + "\x01\x02" + " end  ",
}

CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "table8": {"newline": "break"},
    "no_paragraph_break": {"paragraph_break": False},
    "one_page": {"max_pages": 1},
    "two_pages_break": {"max_pages": 2, "newline": "break"},
    "no_crop": {"auto_crop_width": False, "auto_crop_last_page": False},
    "tab8_pilcrow": {"tab_size": 8, "newline_mark": "\u00b6"},
    "colours": {"font_color": "#202080", "page_bg_color": "#fff8e0"},
    "narrow": {"page_width": 90, "page_height": 120, "max_pages": 3},
    "narrow_break": {"page_width": 90, "page_height": 120, "max_pages": 3, "newline": "break"},
    "tiny_one_page": {"page_width": 60, "page_height": 40, "max_pages": 1},
    "tiny_two_pages_break": {"page_width": 60, "page_height": 40, "max_pages": 2, "newline": "break"},
}
#: (config, text) pairs whose PNG bytes are pinned too (the rest: layout only, to keep the test quick).
PNG_CASES = [("default", t) for t in TEXTS] + [("table8", t) for t in ("prose", "tabs", "controls", "rtl", "newlines")] \
    + [("colours", "prose"), ("no_crop", "short"), ("one_page", "very_long")]


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data).hexdigest()


def _layout_fingerprint(lay: Any) -> str:
    """sha256 of the layout as JSON (the input text left out: it is the key)."""
    d = dataclasses.asdict(lay)
    d.pop("text")
    return _sha(json.dumps(d, sort_keys=True, ensure_ascii=True))


def _renderers() -> dict[str, Any]:
    from kit.vfold.render import RenderConfig, Renderer

    return {name: Renderer(RenderConfig(**kw)) for name, kw in CONFIGS.items()}


def _env(renderers: dict[str, Any]) -> dict[str, Any]:
    """What the pixels depend on besides the code: the font faces (name and file hash) and Pillow."""
    import PIL

    chain = renderers["default"].chain
    return {"pillow": PIL.__version__,
            "faces": [[f.name, _sha(Path(f.path).read_bytes())[:16]] for f in chain.faces]}


def fingerprints() -> dict[str, Any]:
    """Layout hashes for every (config, text), PNG hashes for :data:`PNG_CASES`, and the environment."""
    from kit.vfold.render import RenderError

    rs = _renderers()
    layouts: dict[str, Any] = {}
    for cname, r in rs.items():
        for tname, text in TEXTS.items():
            lay = r.layout(text)
            layouts[f"{cname}/{tname}"] = {"sha": _layout_fingerprint(lay), "pages": len(lay.pages),
                                           "lines": len(lay.lines()), "end": lay.end}
    pngs = {f"{c}/{t}": _sha(b"".join(_sha(p).encode() for p in rs[c].render_png(TEXTS[t]))) for c, t in PNG_CASES}
    errors = {}
    for bad in (b"bytes", None, 3, ["list"]):
        try:
            rs["default"].layout(bad)  # type: ignore[arg-type]
        except RenderError as e:
            errors[type(bad).__name__] = str(e)
    return {"env": _env(rs), "layouts": layouts, "pngs": pngs, "errors": errors}


@pytest.fixture(scope="module")
def pinned() -> tuple[dict[str, Any], dict[str, Any]]:
    return json.loads(FIXTURE.read_text(encoding="utf-8")), fingerprints()


def test_layouts_match_their_pinned_fingerprints(pinned):
    want, got = pinned
    if got["env"] != want["env"]:
        pytest.skip(f"other fonts or Pillow than the fixture's ({got['env']} vs {want['env']}): widths differ")
    assert sorted(got["layouts"]) == sorted(want["layouts"])
    bad = [k for k in want["layouts"] if got["layouts"][k] != want["layouts"][k]]
    assert not bad, f"layouts differ: {bad}"
    assert got["errors"] == want["errors"]


def test_rendered_pages_match_their_pinned_png_bytes(pinned):
    want, got = pinned
    if got["env"] != want["env"]:
        pytest.skip(f"other fonts or Pillow than the fixture's ({got['env']} vs {want['env']})")
    bad = [k for k in want["pngs"] if got["pngs"].get(k) != want["pngs"][k]]
    assert not bad and got["pngs"].keys() == want["pngs"].keys(), f"PNG bytes differ: {bad}"


def test_the_fingerprint_sees_a_one_pixel_change():
    """The fixture can fail: one line's width one pixel off changes the layout's hash."""
    from kit.vfold.render import Renderer

    lay = Renderer().layout(TEXTS["prose"])
    before = _layout_fingerprint(lay)
    lay.pages[0].lines[1].width += 1
    assert _layout_fingerprint(lay) != before


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    fp = fingerprints()
    FIXTURE.write_text(json.dumps(fp, indent=1, sort_keys=True, ensure_ascii=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}: {len(fp['layouts'])} layouts, {len(fp['pngs'])} PNG renderings")
