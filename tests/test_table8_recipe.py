"""POINTS-Seeker Table 8 (App. B.2, Glyph's rendering parameters) lives once, in the recipe (issue 26 item 2):
every Table 8 value is a cited ``vfold.*`` entry of kit/recipes/points_seeker.yaml, and
:class:`~kit.vfold.render_config.RenderConfig`'s defaults (and ``TABLE8_CONFIG``) are read from it, so a changed
recipe value changes the renderer and render_config.py holds no number of its own for those fields."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.recipes import RECIPE_DIR, load_recipe, paper_default
from kit.recipes.sections import section_problem
from kit.vfold.render_config import TABLE8_CONFIG, RenderConfig

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT.parent / "shared" / "seeds" / "points_seeker.txt"

# Table 8 as the paper prints it (parameter -> value); checked against the seed below when it is present
TABLE8 = {
    "page-size": "595×842", "dpi": "72", "margin-x": "10", "margin-y": "10", "font-path": "Verdana.ttf",
    "font-size": "9", "line-height": "10", "font-color": "#000000", "alignment": "LEFT", "horizontal-scale": "1.0",
    "first-line-indent": "0", "left-indent": "0", "right-indent": "0", "space-before": "0", "space-after": "0",
    "border-width": "0", "border-padding": "0", "page-bg-color": "#FFFFFF", "para-bg-color": "#FFFFFF",
    "auto-crop-width": "true", "auto-crop-last-page": "true",
}
# recipe keys of each Table 8 parameter (vfold.<key>)
KEYS = {p: [p.replace("-", "_")] for p in TABLE8} | {"page-size": ["page_width", "page_height"], "font-path": ["font"]}
# Table 8 values that are not RenderConfig fields: the font is a path (the kit's substitute, kit.vfold.fonts), and
# no paragraph background is painted
NOT_FIELDS = {"font", "para_bg_color"}
FIELDS = [k for p in TABLE8 for k in KEYS[p] if k not in NOT_FIELDS]


@pytest.mark.skipif(not SEED.is_file(), reason="the papers (../shared/seeds) are not beside this checkout")
def test_table8_constant_is_the_papers_table():
    text = SEED.read_text(encoding="utf-8")
    body = text[text.index("Parameter\tValue"):text.index("Table 8: Parameter configuration")]
    rows = dict(line.split("\t", 1) for line in body.strip().splitlines()[1:])
    rows["page-size"] = rows["page-size"].replace("$", "").replace("\\times ", "×").replace(" ", "")
    assert rows == TABLE8


def test_every_table8_value_is_a_cited_recipe_entry():
    r = load_recipe("points_seeker")
    for param, shown in TABLE8.items():
        for key in KEYS[param]:
            e = r.entries.get(f"vfold.{key}")
            assert e is not None and e.origin == "points_seeker", f"Table 8 {param}: no vfold.{key} in the recipe"
            assert e.source and e.source.startswith("App. B.2 Table 8 ("), key
            assert f"({param} {shown}" in e.source, f"vfold.{key}: the source should quote Table 8's '{param} {shown}'"
            if key in NOT_FIELDS:  # the kit's own part is explained
                assert e.kit and e.paper, key
            else:
                assert e.kit is None, f"vfold.{key} is Table 8's value, not a kit choice"
    w, h = (int(x) for x in TABLE8["page-size"].split("×"))
    assert (r.get("vfold.page_width"), r.get("vfold.page_height")) == (w, h)
    for key in ("dpi", "margin_x", "margin_y", "font_size", "line_height", "first_line_indent", "border_padding"):
        assert r.get(f"vfold.{key}") == int(TABLE8[key.replace("_", "-")]), key
    assert r.get("vfold.horizontal_scale") == 1.0 and r.get("vfold.alignment") == "left"
    assert r.get("vfold.auto_crop_width") is True and r.get("vfold.auto_crop_last_page") is True
    assert r.get("vfold.para_bg_color") == r.get("vfold.page_bg_color")  # why no paragraph background is painted


def test_render_config_defaults_are_the_recipes_values():
    for key in FIELDS:
        want = paper_default(f"vfold.{key}", "points_seeker")
        assert getattr(RenderConfig(), key) == want, key
        assert getattr(TABLE8_CONFIG, key) == want, key
    assert TABLE8_CONFIG.newline == "break" and not TABLE8_CONFIG.paragraph_break


def test_render_config_source_has_no_number_of_its_own_for_table8_fields():
    src = (ROOT / "kit" / "vfold" / "render_config.py").read_text(encoding="utf-8")
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "RenderConfig")
    defaults = {n.target.id: n.value for n in cls.body if isinstance(n, ast.AnnAssign) and n.value is not None}
    assert set(FIELDS) <= set(defaults), set(FIELDS) - set(defaults)
    for key in FIELDS:
        v = defaults[key]
        assert isinstance(v, ast.Call) and [ast.literal_eval(a) for a in v.args] == [key], \
            f"RenderConfig.{key} = {ast.unparse(v)}: read it from the recipe (vfold.{key})"


def test_recipe_types_are_strict():
    assert section_problem("vfold", {k: paper_default(f"vfold.{k}", "points_seeker") for k in (*FIELDS, *NOT_FIELDS)}) is None
    for bad in ({"dpi": True}, {"page_width": 0}, {"font_size": "9"}, {"font_color": "black"}, {"alignment": "LEFT"},
                {"horizontal_scale": 0.9}, {"left_indent": 2}, {"auto_crop_width": 1}, {"page_bg_colour": "#FFFFFF"}):
        assert section_problem("vfold", bad) is not None, bad


_PROBE = """
import json, sys
from pathlib import Path
import kit.recipes
kit.recipes.RECIPE_DIR = Path(sys.argv[1])
try:
    from kit.vfold.render_config import TABLE8_CONFIG, RenderConfig
except Exception as e:
    print(json.dumps({"error": type(e).__name__ + ": " + str(e)[:200]}))
else:
    c = RenderConfig()
    print(json.dumps({"page_width": c.page_width, "font_size": c.font_size, "t8_page_width": TABLE8_CONFIG.page_width,
                      "pixels": c.pixels()["width"]}))
"""


def _probe(tmp_path: Path, edits: dict[str, str]) -> dict:
    d = tmp_path / "recipes"
    d.mkdir()
    for f in RECIPE_DIR.glob("*.yaml"):
        shutil.copy(f, d / f.name)
    p = d / "points_seeker.yaml"
    text = p.read_text(encoding="utf-8")
    for key, value in edits.items():
        text, n = re.subn(rf"^(  {key}: \{{value: )[^,]+,", rf"\g<1>{value},", text, flags=re.M)
        assert n == 1, key
    p.write_text(text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", _PROBE, str(d)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_changed_recipe_value_changes_the_renderer(tmp_path):
    got = _probe(tmp_path, {"page_width": "400", "font_size": "11"})
    assert got == {"page_width": 400, "font_size": 11, "t8_page_width": 400, "pixels": 400}


def test_an_unsupported_recipe_value_fails_at_import(tmp_path):
    got = _probe(tmp_path, {"horizontal_scale": "0.9"})
    assert "horizontal_scale" in got.get("error", ""), got
