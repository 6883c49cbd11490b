"""V-Fold modes (kit.vfold.modes): "paper" = Table 8 layout and every stale observation folded (POINTS-Seeker
§3.3, Appendix B.2), "kit" = flowed layout, folded only if smaller and lossless; each option settable, recorded
in the fold log and events, selectable through HarnessConfig; the SFT renderer's paper mode (Appendix A.3)."""

from __future__ import annotations

import pydantic
import pytest

from kit.harness.config import HarnessConfig
from kit.harness.context import make_context_builder
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.events import EventType
from kit.harness.registry import EvidenceRegistry
from kit.policy.scripted import CharTokenCounter
from kit.vfold.fold import RenderAllContext, VFoldContext, points_seeker_config
from kit.vfold.modes import VFOLD_MODES, layout_of, vfold_options
from kit.vfold.render import TABLE8_CONFIG, RenderConfig, Renderer
from kit.vfold.training import render_trajectory
from tests.test_vfold_fold import history

SHORT_LINES = "\n".join(f"row {i}: value {i * 7}" for i in range(40))  # a table-like observation
TINY = "No results."  # pages cost more tokens than this text
# Table 8 layout with a 1-page cap: 200 short lines do not fit (82 lines per page)
CAPPED = RenderConfig(newline="break", paragraph_break=False, max_pages=1)
LONG_LINES = "\n".join(f"line {i}" for i in range(200))


def _obs_history(*bodies: str):
    msgs = history(len(bodies), 10)
    tools = [m for m in msgs if m.role == "tool"]
    for m, body in zip(tools, bodies):
        m.content[0].text = body
    return msgs


@pytest.fixture
def reg(tmp_path):
    return EvidenceRegistry(tmp_path / "ws")


def test_paper_mode_renders_table8_geometry(reg):
    c = CharTokenCounter()
    paper = VFoldContext(c, tau=0, keep=0, mode="paper")
    kit = VFoldContext(c, tau=0, keep=0, mode="kit")
    assert paper.renderer.config == TABLE8_CONFIG and paper.renderer.config.newline == "break"
    assert kit.renderer.config == RenderConfig() and kit.renderer.config.newline == "mark"
    msgs = _obs_history(SHORT_LINES)
    out = paper.build(msgs, reg)
    pages = [r for r in out[-1].image_refs() if reg.resolve(r).kind == "rendered_obs"]
    # the registered page is exactly Glyph's layout: one line per source line, same pixels
    assert [reg.read(p) for p in pages] == Renderer(TABLE8_CONFIG).render(SHORT_LINES).png()
    assert len(Renderer(TABLE8_CONFIG).layout(SHORT_LINES).lines()) == 40
    assert len(Renderer(RenderConfig()).layout(SHORT_LINES).lines()) < 40  # the flowed variant packs them


def test_paper_mode_folds_what_kit_mode_keeps_because_not_smaller(tmp_path):
    c = CharTokenCounter()
    kit_reg, paper_reg = EvidenceRegistry(tmp_path / "k"), EvidenceRegistry(tmp_path / "p")
    kit, paper = VFoldContext(c, tau=0, keep=0, mode="kit"), VFoldContext(c, tau=0, keep=0, mode="paper")
    msgs = _obs_history(TINY)
    assert kit.build(msgs, kit_reg)[-1].text() == TINY and len(kit_reg) == 0
    assert kit.state(kit_reg).renders and next(iter(kit.state(kit_reg).renders.values())).reason == "not_smaller"
    out = paper.build(msgs, paper_reg)
    fo = next(iter(paper.state(paper_reg).renders.values()))
    assert fo.folded and fo.larger and fo.vision_tokens >= fo.text_tokens and TINY not in out[-1].text()
    assert paper.log(paper_reg)[-1]["folded_larger"] == 1 and kit.log(kit_reg)[-1]["folded_observations"] == 0


def test_paper_mode_folds_a_truncated_observation_and_records_it(tmp_path):
    c = CharTokenCounter()
    kit_reg, paper_reg = EvidenceRegistry(tmp_path / "k"), EvidenceRegistry(tmp_path / "p")
    kit = VFoldContext(c, tau=0, keep=0, mode="kit", renderer=Renderer(CAPPED))
    paper = VFoldContext(c, tau=0, keep=0, mode="paper", renderer=Renderer(CAPPED))
    assert paper.options.layout == "table8" and not paper.options.overridden()  # the page cap is not layout
    msgs = _obs_history(LONG_LINES)
    assert kit.build(msgs, kit_reg)[-1].text() == LONG_LINES
    assert [e["reason"] for e in kit.events(kit_reg)] == ["truncated"]
    out = paper.build(msgs, paper_reg)
    assert LONG_LINES not in out[-1].text() and len(paper_reg) == 1
    (ev,) = paper.events(paper_reg)
    assert ev["type"] == "folded_lossy" and ev["losses"] == ["truncated"]
    assert ev["detail"]["chars"] == len(LONG_LINES) > ev["detail"]["rendered_chars"] > 0
    assert ev["vfold"]["mode"] == "paper" and paper.log(paper_reg)[-1]["folded_lossy"] == 1


def test_each_option_is_settable_and_the_mode_is_recorded(reg):
    c = CharTokenCounter()
    b = VFoldContext(c, tau=0, keep=0, mode="paper", layout="flowed", only_if_smaller=True)
    assert b.renderer.config.newline == "mark" and b.only_if_smaller and not b.require_lossless
    b.build(_obs_history(TINY), reg)
    assert b.log(reg)[-1]["vfold"] == {"mode": "paper", "layout": "flowed", "only_if_smaller": True,
                                       "require_lossless": False, "overridden": ["layout", "only_if_smaller"]}
    assert VFOLD_MODES["paper"] == {"layout": "table8", "only_if_smaller": False, "require_lossless": False}
    assert layout_of(RenderConfig(page_width=400)) == "custom"


def test_harness_config_selects_the_mode_through_the_strategy_builder():
    c = CharTokenCounter()
    assert HarnessConfig().vfold_mode == "kit"
    kit = make_context_builder(HarnessConfig(context_strategy="vfold"), c)
    assert kit.options.record()["mode"] == "kit" and kit.renderer.config.newline == "mark"
    paper = make_context_builder(HarnessConfig(context_strategy="vfold", vfold_mode="paper"), c)
    assert (paper.options.layout, paper.only_if_smaller, paper.require_lossless) == ("table8", False, False)
    mixed = make_context_builder(HarnessConfig(context_strategy="vfold", vfold_mode="paper",
                                               vfold_require_lossless=True), c)
    assert mixed.require_lossless and mixed.options.overridden() == ["require_lossless"]
    ra = make_context_builder(HarnessConfig(context_strategy="render_all", vfold_mode="paper"), c)
    assert isinstance(ra, RenderAllContext) and ra.renderer.config == TABLE8_CONFIG and not ra.only_if_smaller
    ps = make_context_builder(points_seeker_config(), c)
    assert ps.options.mode == "paper" and (ps.tau, ps.keep) == (8192, 2)


def test_bad_mode_names_error_clearly():
    c = CharTokenCounter()
    with pytest.raises(ValueError, match="unknown V-Fold mode 'papr'; expected one of \\['kit', 'paper'\\]"):
        VFoldContext(c, mode="papr")
    with pytest.raises(ValueError, match="unknown V-Fold layout 'glyph'"):
        vfold_options("paper", layout="glyph")
    with pytest.raises(ValueError, match="contradicts the given renderer"):
        VFoldContext(c, mode="paper", layout="flowed", renderer=Renderer(TABLE8_CONFIG))
    with pytest.raises(ValueError, match="must be a bool"):
        vfold_options("kit", only_if_smaller="no")
    with pytest.raises(pydantic.ValidationError, match="vfold_mode"):
        HarnessConfig(vfold_mode="papr")
    with pytest.raises(pydantic.ValidationError, match="vfold_layout"):
        HarnessConfig(vfold_layout="glyph")


def _record(tmp_path, body: str) -> EpisodeRecord:
    msgs = _obs_history(body)
    return EpisodeRecord(id="ep", task=Task(id="t", question="q"), config_hash="0", messages=msgs,
                         workspace=str(tmp_path / "src"), status="answered", trainable=True)


def test_training_paper_mode_renders_every_observation_and_records_losses(tmp_path):
    (tmp_path / "src").mkdir()
    rec = _record(tmp_path, LONG_LINES)
    kit = render_trajectory(rec, tmp_path / "kit", Renderer(CAPPED))
    assert [m.text() for m in kit.messages if m.role == "tool"] == [LONG_LINES]
    assert [e.type for e in kit.events] == [EventType.VFOLD_KEPT_AS_TEXT] and "vfold_mode:kit" in kit.labels
    paper = render_trajectory(rec, tmp_path / "paper", Renderer(CAPPED), mode="paper")
    tool = next(m for m in paper.messages if m.role == "tool")
    assert LONG_LINES not in tool.text() and [i.kind for i in paper.images] == ["rendered_obs"]
    (ev,) = paper.events
    assert ev.type == EventType.VFOLD_FOLDED_LOSSY and ev.detail["losses"] == ["truncated"]
    assert ev.detail["vfold"]["mode"] == "paper" and "vfold_mode:paper" in paper.labels
    default = render_trajectory(_record(tmp_path, SHORT_LINES), tmp_path / "d", mode="paper")  # its own renderer
    assert [(tmp_path / "d" / i.filename).read_bytes() for i in default.images] == \
        Renderer(TABLE8_CONFIG).render(SHORT_LINES).png()
    with pytest.raises(ValueError, match="unknown V-Fold mode"):
        render_trajectory(rec, tmp_path / "x", mode="table8")


def test_paper_mode_folds_missing_glyphs_and_says_so(reg):
    c = CharTokenCounter()
    body = "private use \U0010fffd only. " + "Ray Charles recorded for Atlantic. " * 40
    paper = VFoldContext(c, tau=0, keep=0, mode="paper")
    out = paper.build(_obs_history(body), reg)
    assert body not in out[-1].text() and len(reg) == 1
    (ev,) = paper.events(reg)
    assert ev["losses"] == ["missing_glyphs"] and ev["detail"]["missing_glyphs"] == 1
    strict = VFoldContext(c, tau=0, keep=0, mode="paper", require_lossless=True)
    assert strict.build(_obs_history(body), EvidenceRegistry(reg.workspace.parent / "s"))[-1].text() == body
