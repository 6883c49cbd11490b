"""V-Fold renderer: Table 8 geometry, determinism, no character lost, bad input, fonts."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from PIL import Image, ImageDraw
from pydantic import ValidationError

from kit.paths import PROJECT_ROOT
from kit.vfold.fonts import FontChain, FontFace, FontNotFoundError, _cmap, fallback_faces, primary_font_path
from kit.vfold.render import (
    NEWLINE_MARK,
    TABLE8_CONFIG,
    RenderConfig,
    Renderer,
    RenderError,
    default_renderer,
    encode_png,
)

WORDS = ("the song was recorded by ray charles in 1959 and released as a single on atlantic records it reached "
         "number one on the billboard rhythm and blues chart while the album sold well across europe").split()


def prose(n_words: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n_words))


@pytest.fixture(scope="module")
def r():
    return Renderer()


@pytest.fixture(scope="module")
def r8():
    return Renderer(TABLE8_CONFIG)


def expected_display(s: str, mode: str) -> str:
    """The documented display mapping, written independently of the renderer."""
    out = []
    for ch in s:
        c = ord(ch)
        if ch == "\n":
            out.append(NEWLINE_MARK if mode == "mark" else "")
        elif ch == "\t":
            out.append(ch)
        elif c < 0x20:
            out.append("^" + chr(c + 64))
        elif c == 0x7F:
            out.append("^?")
        elif 0x80 <= c < 0xA0:
            out.append(f"\\x{c:02x}")
        elif 0xD800 <= c < 0xE000 or 0xFDD0 <= c < 0xFDF0 or (c & 0xFFFE) == 0xFFFE:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)
    return "".join(out)


def check_layout(lay, text, width):
    """Spans contiguous from 0, drawn == display form of the source, lines within the content width."""
    pos = 0
    for ln in lay.lines():
        assert ln.start == pos, "lines must cover the text without gaps"
        assert ln.drawn == expected_display(text[ln.start:ln.end], lay.newline)
        assert ln.width <= width or len(ln.drawn.strip()) == 1
        pos = ln.end
    assert pos == lay.end
    return True


# ------------------------------------------------------------------------------------------ geometry
def test_table8_parameters_are_pinned():
    c = RenderConfig()
    assert (c.page_width, c.page_height, c.dpi, c.margin_x, c.margin_y) == (595, 842, 72, 10, 10)
    assert (c.font_size, c.line_height, c.font_color.upper(), c.page_bg_color.upper()) == (9, 10, "#000000", "#FFFFFF")
    assert c.alignment == "left" and c.horizontal_scale == 1.0
    assert (c.first_line_indent, c.left_indent, c.right_indent, c.space_before, c.space_after) == (0, 0, 0, 0, 0)
    assert (c.border_width, c.border_padding) == (0, 0)
    assert c.auto_crop_width and c.auto_crop_last_page
    assert TABLE8_CONFIG.newline == "break"
    px = c.pixels()
    assert (px["width"], px["height"], px["margin_x"], px["margin_y"], px["line_height"]) == (595, 842, 10, 10, 10)
    assert px["font_px"] == 9 and px["content_width"] == 575 and px["lines_per_page"] == 82
    assert RenderConfig(dpi=144).pixels()["width"] == 1190


def test_unsupported_table8_deviations_are_refused():
    with pytest.raises(ValidationError):
        RenderConfig(first_line_indent=4)
    with pytest.raises(ValidationError):
        RenderConfig(horizontal_scale=0.9)
    with pytest.raises(ValidationError):
        RenderConfig(newline_mark="ab")


def test_full_pages_are_595x842_with_white_margins():
    rr = Renderer(RenderConfig(auto_crop_width=False, auto_crop_last_page=False))
    res = rr.render(prose(4000))
    assert len(res.pages) >= 2
    for p in res.pages:
        assert p.size == (595, 842) and p.mode == "L"
        a = np.asarray(p)
        assert (a[:, :10] == 255).all() and (a[:, -10:] == 255).all(), "left/right margins must stay white"
        assert (a[:10] == 255).all() and (a[-8:] == 255).all(), "top/bottom margins must stay white"
    assert len(res.layout.pages[0].lines) == 82


def test_line_pitch_is_10px(r8):
    res = r8.render("\n".join("X" * 3 for _ in range(20)))
    a = np.asarray(res.pages[0])
    rows = np.flatnonzero((a < 128).any(axis=1))
    tops = [rows[0]] + [rows[i] for i in range(1, len(rows)) if rows[i] - rows[i - 1] > 1]
    assert len(tops) == 20 and set(np.diff(tops)) == {10}
    assert 10 <= tops[0] <= 14  # cap height below the 10-px top margin


def test_auto_crop_width_and_last_page(r):
    res = r.render("Hello")
    w, h = res.pages[0].size
    assert h == 10 + 10 + 10  # margins + one line
    assert w == 20 + int(r.chain.font(0).getlength("Hello"))
    long = r.render(prose(3000))
    assert all(p.size[1] == 842 for p in long.pages[:-1])
    assert long.pages[-1].size[1] == 20 + 10 * len(long.layout.pages[-1].lines)
    assert all(575 - 60 <= p.size[0] - 20 <= 575 for p in long.pages)


def test_atlas_composition_matches_pillow_drawing():
    rr = Renderer(RenderConfig(auto_crop_width=False, auto_crop_last_page=False))
    s = "The quick brown fox jumps over the lazy dog. AVATAR Tower, 1234567890 (x) [y] {z} -- ++ == @#$%"
    ours = np.asarray(rr.render(s).pages[0]).astype(int)
    ref = Image.new("L", (595, 842), 255)
    ImageDraw.Draw(ref).text((10, 10), s, font=rr.chain.font(0), fill=0)
    d = np.abs(ours - np.asarray(ref).astype(int))
    ink = (np.asarray(ref) < 255).sum()
    assert ink > 1000 and d.max() <= 16 and (d > 0).sum() <= ink // 100


# ------------------------------------------------------------------------------------------ determinism
def test_same_text_same_pixels_and_bytes(r):
    text = prose(2500, seed=3) + "\n\n| a | b |\n| 1 | 2 |\nhttps://example.org/" + "x/" * 400
    a, b = r.render(text).png(), Renderer().render(text).png()
    assert a == b and len(a) >= 1
    assert r.render(text).png() == a


def test_deterministic_across_processes(r):
    text = prose(800, seed=7)
    here = hashlib.sha256(b"".join(r.render(text).png())).hexdigest()
    code = ("import hashlib,sys; from kit.vfold.render import Renderer; "
            f"print(hashlib.sha256(b''.join(Renderer().render({text!r}).png())).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == here


def test_png_roundtrip_and_colours():
    rr = Renderer(RenderConfig(font_color="#102030", page_bg_color="#F0F0E0"))
    res = rr.render("colour test")
    assert res.pages[0].mode == "RGB"
    for p, data in zip(res.pages, res.png()):
        back = Image.open(io.BytesIO(data))
        back.load()
        assert back.size == p.size and np.array_equal(np.asarray(back), np.asarray(p))
    assert tuple(np.asarray(res.pages[0])[0, 0]) == (0xF0, 0xF0, 0xE0)
    with pytest.raises(RenderError):
        encode_png(Image.new("RGBA", (4, 4)))


# ------------------------------------------------------------------------------------------ no character lost
@pytest.mark.parametrize("mode", ["mark", "break"])
def test_every_character_is_laid_out_and_drawn(mode):
    rr = Renderer(RenderConfig(newline=mode))
    text = ("# Title\n\nParagraph one with words.\n- item 1\n- item 2\n\n| Released | May 1970 |\n| Genre | Vocal |\n"
            "tab\there  spaces   kept\n" + "https://en.wikipedia.org/wiki/" + "Ray_Charles_" * 80 + "\nend")
    res = rr.render(text)
    assert check_layout(res.layout, text, 575)
    assert res.layout.reconstruct() == text
    assert res.rendered_chars == len(text) and res.lossless
    # glyphs really reach the pixels: each line with visible glyphs has ink in its 10-px band
    for page, img in zip(res.layout.pages, res.pages):
        a = np.asarray(img) < 160
        for i, ln in enumerate(page.lines):
            band = a[10 + 10 * i + 3: 10 + 10 * i + 10]  # cap-height zone of line i only
            assert band.any() == bool(ln.drawn.strip()), (i, ln.drawn)


def test_long_tokens_wrap_without_losing_characters(r):
    url = "https://example.org/" + "/".join(f"segment{i}-x" for i in range(300)) + "?q=" + "z" * 500
    res = r.render(url)
    lines = res.layout.lines()
    assert len(lines) > 5 and res.layout.reconstruct() == url
    assert all(ln.width <= 575 for ln in lines)
    assert sum(ln.drawn.endswith(("/", "-", "?", "=")) for ln in lines[:-1]) >= len(lines) // 2


def test_flow_mode_flows_short_lines(r, r8):
    rows = "\n".join(f"| Row {i} | value {i} |" for i in range(200))
    flowed, glyph = r.render(rows), r8.render(rows)
    assert len(flowed.layout.lines()) * 4 < len(glyph.layout.lines())
    assert NEWLINE_MARK in flowed.layout.glyphs()
    assert flowed.layout.reconstruct() == rows and glyph.layout.reconstruct() == rows


def test_paragraph_break_starts_a_new_line(r):
    lay = r.layout("first paragraph\n\nsecond paragraph\nsame line")
    assert [ln.drawn for ln in lay.lines()] == [f"first paragraph{NEWLINE_MARK}{NEWLINE_MARK}",
                                                 f"second paragraph{NEWLINE_MARK}same line"]


ALPHABET = hst.sampled_from(list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 .,;:/-?&=_|()\t\n\n\n") +
                            ["\x00", "\x07", "\x1b", "\x7f", "\x85", "é", "ß", "Ω", "Ж", "€", "\u200b", "\ud800"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hst.lists(hst.one_of(ALPHABET, hst.text(alphabet="abcdefgh/-", min_size=80, max_size=400)), max_size=300))
def test_property_layout_is_lossless(parts):
    text = "".join(parts)
    for rr in (default_renderer(), default_renderer(TABLE8_CONFIG)):
        lay = rr.layout(text)
        assert check_layout(lay, text, 575)
        assert lay.reconstruct() == text
        assert all(len(p.lines) <= 82 for p in lay.pages)


def test_layout_spans_exact_even_with_ambiguous_literals(r):
    text = f"literal {NEWLINE_MARK} and ^A and \\x41 and \x01"
    lay = r.layout(text)
    assert "".join(text[ln.start:ln.end] for ln in lay.lines()) == text
    assert check_layout(lay, text, 575)


# ------------------------------------------------------------------------------------------ bad input
def test_empty_text_gives_no_pages(r):
    res = r.render("")
    assert res.pages == [] and res.png() == [] and res.lossless and res.chars == 0


def test_enormous_text_is_capped_and_reported():
    rr = Renderer(RenderConfig(max_pages=2))
    text = prose(20_000)
    res = rr.render(text)
    assert len(res.pages) == 2 and res.truncated and not res.lossless
    assert 0 < res.rendered_chars < res.chars == len(text)
    assert res.report()["truncated"] is True
    assert "".join(text[ln.start:ln.end] for ln in res.layout.lines()) == text[:res.rendered_chars]


def test_binary_and_control_characters_are_escaped_visibly(r):
    junk = bytes(range(256)).decode("latin-1") + "\udc80\udcff" + "\ufffe"
    res = r.render(junk)
    assert check_layout(res.layout, junk, 575)  # exact spans, even with a literal "^_" in the input
    assert res.pages and res.escaped == 30 + 1 + 32 + 2 + 1  # C0 (not tab/newline), DEL, C1, surrogates, U+FFFE
    glyphs = res.layout.glyphs()
    assert "^@" in glyphs and "^[" in glyphs and "^?" in glyphs and "\\x85" in glyphs and "\\udc80" in glyphs
    no_caret = junk.replace("^", "").replace("\\", "")
    assert r.layout(no_caret).reconstruct() == no_caret
    with pytest.raises(RenderError):
        r.render(b"bytes are not text")


def test_rtl_text_is_rendered_with_bidi_path(r):
    text = "Hebrew: שלום עולם and Arabic: مرحبا بالعالم end"
    res = r.render(text)
    assert res.complex_lines == 1 and res.missing_glyphs == 0 and res.lossless
    assert (np.asarray(res.pages[0]) < 128).sum() > 100
    assert res.layout.reconstruct() == text


def test_cjk_is_rendered_or_reported(r):
    text = "中文字符测试 日本語のテキスト 한국어"
    res = r.render(text)
    covered = all(r.chain.face_for(ord(c)) >= 0 for c in text if not c.isspace())
    if covered:
        assert res.missing_glyphs == 0 and len(res.fonts_used) >= 2
    else:
        assert res.missing_glyphs > 0 and res.missing_sample and not res.lossless
    assert res.layout.reconstruct() == text and res.pages


def test_cjk_fallback_font_draws_real_glyphs():
    faces = [f for f in fallback_faces() if 0x4E2D in _cmap(f)]
    if not faces:
        pytest.skip("no CJK font installed (e.g. apt install fonts-noto-cjk or fonts-wqy-microhei)")
    chain = FontChain([FontFace(str(primary_font_path())), faces[0]], 9)
    res = Renderer(chain=chain).render("中文")
    assert res.missing_glyphs == 0 and faces[0].name in res.fonts_used
    assert (np.asarray(res.pages[0]) < 128).sum() > 20


def test_fallback_chain_picks_covering_font():
    primary = FontFace(str(primary_font_path()))
    stix = [f for f in fallback_faces() if "STIX" in f.path]
    if not stix:
        pytest.skip("matplotlib's STIX fonts are not installed")
    only_stix = next(cp for cp in sorted(_cmap(stix[0])) if cp > 0x2000 and cp not in _cmap(primary)
                     and not __import__("unicodedata").category(chr(cp)).startswith(("M", "C")))
    ch = chr(only_stix)
    alone = Renderer(chain=FontChain([primary], 9)).render(f"a{ch}b")
    chained = Renderer(chain=FontChain([primary, stix[0]], 9)).render(f"a{ch}b")
    assert alone.missing_glyphs == 1 and alone.missing_sample == ch
    assert chained.missing_glyphs == 0 and "STIXGeneral" in chained.fonts_used


def test_font_errors_are_clear(tmp_path):
    with pytest.raises(FontNotFoundError, match="not a font file"):
        Renderer(RenderConfig(font_path=str(tmp_path / "missing.ttf")))
    with pytest.raises(FontNotFoundError):
        fallback_faces([str(tmp_path / "nope.otf")])


def test_primary_font_is_dejavu_sans():
    assert primary_font_path().name == "DejaVuSans.ttf"


@pytest.mark.slow
def test_real_articles_are_laid_out_losslessly(data_dir, r):
    from kit.web.zim import LocalZimWeb

    zim = data_dir / "zim" / "wikipedia_en_ray_charles_maxi_2023-09.zim"
    web = LocalZimWeb([zim])
    for _, _, path, _, _ in list(web.corpus())[:10]:
        text = web.fetch_sync(f"zim://{zim.stem}/{path}").markdown[:6000]
        res = r.render(text)
        assert check_layout(res.layout, text, 575) and res.layout.reconstruct() == text
        assert res.rendered_chars == len(text)
        json.dumps(res.report())
