"""V-Fold rendering benchmark: speed on one core and text-vs-vision tokens (POINTS-Seeker §3.3, Table 8).

    python benchmarks/bench_vfold.py [--articles 50] [--chars 6000] [--repeats 3] [--no-pdf]

Corpus: the plain text (Markdown) of the first ``--articles`` articles of the Ray Charles 2023 ZIM
archive of the shared data, each clipped to ``--chars`` characters. Figures printed:

* pages rendered per second on one core (layout + rasterization + PNG bytes), for the kit's
  renderer in its V-Fold layout and in Table 8's Glyph layout, and — when ``reportlab`` and
  ``pypdfium2`` are installed — for a reference PDF pipeline measured in the same run: the same
  page parameters set as a reportlab paragraph per article (newlines as line breaks, as Glyph
  does) rasterized at 72 dpi with PDFium, then PNG-encoded. Target: >= 45 pages/s and >= 5x the
  reference pipeline. The articles mostly fit on one partly filled page, so the speed on dense full
  pages (all articles as one text) is printed too.
* Qwen text tokens of the articles (``QwenTokenCounter().count_text``, the real Qwen BPE) against
  Qwen2-VL vision tokens of their pages (``count_image``: one per 28x28 pixels after smart resize),
  for both layouts. Target: >= 2.5x fewer vision than text tokens in the V-Fold layout.
* characters lost: the layout model must cover every article exactly and its drawn glyphs must
  reconstruct the text (target: 0).

Ends with one ``BENCH {json}`` line; exits 1 when a target is missed, 2 without the shared data.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import Summary  # noqa: E402


def load_articles(n: int, max_chars: int) -> list[str] | None:
    """The first ``n`` articles of the Ray Charles archive as Markdown; None without the shared data."""
    from kit.paths import shared_data_dir
    from kit.web.zim import LocalZimWeb

    data = shared_data_dir()
    if data is None:
        return None
    zim = data / "zim" / "wikipedia_en_ray_charles_maxi_2023-09.zim"
    web = LocalZimWeb([zim])
    texts = []
    for _, _, path, _, _ in web.corpus():
        texts.append(web.fetch_sync(f"zim://{zim.stem}/{path}").markdown[:max_chars])
        if len(texts) == n:
            break
    return texts


def time_pages(render_one, texts, repeats: int) -> tuple[float, int]:
    """Best-of-``repeats`` pages/s of ``render_one(text) -> number of pages`` over all texts."""
    best, pages = 0.0, 0
    for _ in range(repeats):
        t = time.perf_counter()
        pages = sum(render_one(x) for x in texts)
        best = max(best, pages / (time.perf_counter() - t))
    return best, pages


def pdf_pipeline(font_path: str):
    """Reference pipeline with Table 8's parameters: reportlab PDF -> PDFium raster (72 dpi) -> PNG."""
    from xml.sax.saxutils import escape

    import pypdfium2 as pdfium
    from reportlab.lib.enums import TA_LEFT
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    pdfmetrics.registerFont(TTFont("KitSans", font_path))
    style = ParagraphStyle("t8", fontName="KitSans", fontSize=9, leading=10, alignment=TA_LEFT, textColor="#000000",
                           firstLineIndent=0, leftIndent=0, rightIndent=0, spaceBefore=0, spaceAfter=0)

    def render_one(text: str) -> int:
        buf = io.BytesIO()
        doc = SimpleDocTemplate(buf, pagesize=(595, 842), leftMargin=10, rightMargin=10, topMargin=10, bottomMargin=10)
        body = escape(text).replace("\n", "<br/>")
        doc.build([Paragraph(body, style)])
        pdf = pdfium.PdfDocument(buf.getvalue())
        n = len(pdf)
        for i in range(n):
            im = pdf[i].render(scale=1.0).to_pil().convert("L")
            im.save(io.BytesIO(), format="PNG")
        pdf.close()
        return n

    return render_one


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--articles", type=int, default=50)
    ap.add_argument("--chars", type=int, default=6000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-pdf", action="store_true", help="skip the reference PDF pipeline")
    args = ap.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    from kit.policy.tokens import QwenTokenCounter
    from kit.vfold.fonts import primary_font_path
    from kit.vfold.render import TABLE8_CONFIG, RenderConfig, Renderer

    summary = Summary("bench_vfold")
    texts = load_articles(args.articles, args.chars)
    if texts is None:
        print("shared data not found: set MMSEARCH_KIT_DATA")
        return summary.skip("shared data not found")
    counter = QwenTokenCounter()
    text_tokens = sum(counter.count_text(t) for t in texts)
    chars = sum(map(len, texts))
    print(f"corpus: {len(texts)} articles, {chars:,} characters, {text_tokens:,} Qwen text tokens "
          f"({chars / text_tokens:.2f} chars/token); one core: {os.sched_getaffinity(0) if hasattr(os, 'sched_getaffinity') else '?'}")

    rows = {}
    for name, cfg in (("vfold layout (flowed lines)", RenderConfig()), ("table8 layout (glyph)", TABLE8_CONFIG)):
        r = Renderer(cfg)
        for t in texts:  # warm the glyph atlas (built once per process)
            r.render(t).png()
        pps, pages = time_pages(lambda t: len(r.render(t).png()), texts, args.repeats)  # noqa: B023 (called within this iteration)
        results = [r.render(t) for t in texts]
        vision = sum(res.vision_tokens(counter) for res in results)
        lost = sum(len(t) - res.rendered_chars for t, res in zip(texts, results))
        exact = sum(res.layout.reconstruct() == t and
                    "".join(t[ln.start:ln.end] for ln in res.layout.lines()) == t for t, res in zip(texts, results))
        missing = sum(res.missing_glyphs for res in results)
        per_article = [counter.count_text(t) / res.vision_tokens(counter) for t, res in zip(texts, results)]
        rows[name] = dict(pps=pps, pages=pages, vision=vision, ratio=text_tokens / vision, lost=lost, exact=exact,
                          missing=missing, median=statistics.median(per_article))
        print(f"\n[{name}] {pages} pages, {pps:.1f} pages/s (layout + raster + PNG, best of {args.repeats})")
        print(f"  vision tokens (Qwen2-VL, 28x28): {vision:,}  text/vision = {text_tokens / vision:.2f}x "
              f"(median per article {statistics.median(per_article):.2f}x)")
        print(f"  characters lost: {lost}; articles reconstructed exactly from the drawn glyphs: {exact}/{len(texts)}; "
              f"glyphs missing from the fonts: {missing}")

    dense = Renderer(RenderConfig(max_pages=10_000))
    joined = "\n\n".join(texts)
    dense.render(joined).png()
    full_pps, full_pages = time_pages(lambda t: len(dense.render(t).png()), [joined], args.repeats)
    print(f"\n[vfold layout, dense full pages: all articles as one text] {full_pages} pages, {full_pps:.1f} pages/s")

    ref = None
    if not args.no_pdf:
        try:
            render_pdf = pdf_pipeline(str(primary_font_path()))
            render_pdf(texts[0])
            ref, ref_pages = time_pages(render_pdf, texts, 1)
            print(f"\n[reference PDF pipeline: reportlab -> PDFium 72 dpi -> PNG] {ref_pages} pages, {ref:.1f} pages/s")
        except ImportError as e:
            print(f"\n[reference PDF pipeline] skipped ({e}); install reportlab and pypdfium2 to measure it")

    v = rows["vfold layout (flowed lines)"]
    print("\nTargets")
    print(f"  speed: {v['pps']:.1f} pages/s >= 45: {'PASS' if v['pps'] >= 45 else 'FAIL'}"
          + (f"; {v['pps'] / ref:.1f}x the reference pipeline (>= 5x: {'PASS' if v['pps'] >= 5 * ref else 'FAIL'})"
             if ref else ""))
    print(f"  tokens: {v['ratio']:.2f}x fewer vision than text tokens >= 2.5x: {'PASS' if v['ratio'] >= 2.5 else 'FAIL'} "
          f"(Table 8 glyph layout: {rows['table8 layout (glyph)']['ratio']:.2f}x)")
    print(f"  characters lost: {v['lost']} (exactly reconstructed: {v['exact']}/{len(texts)}): "
          f"{'PASS' if v['lost'] == 0 and v['exact'] == len(texts) else 'FAIL'}")
    summary.target("vfold_pages_per_s", v["pps"], ">=", 45)
    if ref:
        summary.target("vfold_vs_pdf_pipeline_ratio", v["pps"] / ref, ">=", 5)
    else:
        summary.figure("vfold_vs_pdf_pipeline_ratio", None)  # reference pipeline not measured (--no-pdf or not installed)
    summary.target("text_vs_vision_tokens_ratio", v["ratio"], ">=", 2.5)
    summary.target("characters_lost", v["lost"], "==", 0)
    summary.target("articles_not_reconstructed", len(texts) - v["exact"], "==", 0)
    summary.figure("table8_text_vs_vision_tokens_ratio", rows["table8 layout (glyph)"]["ratio"])
    summary.figure("dense_pages_per_s", full_pps)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
