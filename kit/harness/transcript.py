"""Self-contained HTML transcript of one episode (images inline as data URIs).

Shows each turn's text, its images, tool calls, observations, harness interventions (highlighted) and
the event log, so a researcher can audit an episode in a browser or inline in a notebook.
"""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from kit.harness.episode import EpisodeRecord
from kit.harness.errors import ImageError
from kit.harness.registry import read_regular_file

# Every style is an inline ``style=`` attribute, not a <style> block: JupyterLab's sanitizer drops <style>
# from the outputs of an untrusted (e.g. freshly opened, saved) notebook, GitHub's and nbviewer's previews
# drop it too, and a trusted <style> would restyle JupyterLab's own page (``body``, ``pre``, ``img``).
# Inline styles of the properties JupyterLab's sanitizer allows survive all three (issue 29 part 6); the
# standalone file looks as it did with the <style> block. The class names stay, for tests and user CSS.
_ROLE_BG = {"system": "#f7f7f7", "user": "#eef5ff", "assistant": "#f3fff0", "tool": "#fffbea"}
_STYLE = {
    # the page (was ``body``): a white card, so a dark JupyterLab theme keeps the dark text readable
    "page": "font-family:system-ui,sans-serif;max-width:980px;margin:1.5em auto;padding:0 8px;color:#222;"
            "background:#fff",
    "msg": "border:1px solid #ddd;border-radius:6px;margin:.6em 0;padding:.5em .8em;color:#222",
    "intervention": "border:2px dashed #d9480f;border-radius:6px;margin:.6em 0;padding:.5em .8em;color:#222;"
                    "background:#fff1ec",
    "role": "font-weight:600;font-size:.85em;color:#555",
    "badge": "background:#d9480f;color:#fff;border-radius:3px;padding:0 .4em;font-size:.75em;margin-left:.5em",
    "pre": "white-space:pre-wrap;word-wrap:break-word;margin:.3em 0;font-size:.85em;color:#222;background:none;"
           "border:none;padding:0",
    "img": "max-width:300px;max-height:300px;border:1px solid #ccc;margin:.2em",
    "imgbox": "display:inline-block;text-align:center;font-size:.75em;vertical-align:top",
    "table": "border-collapse:collapse;font-size:.8em;color:#222",
    "cell": "border:1px solid #ddd;padding:.2em .5em;text-align:left;color:#222;background:#fff",
    "final": "border:2px solid #2b8a3e;background:#ebfbee;padding:.6em;border-radius:6px;color:#222",
    "h": "color:#222",
}


def _styles() -> dict[str, Markup]:
    """The inline styles, as Markup (constant CSS: neither escaped nor path-scrubbed)."""
    out = {k: Markup(v) for k, v in _STYLE.items()}
    for role, bg in _ROLE_BG.items():
        out[f"msg_{role}"] = Markup(f"{_STYLE['msg']};background:{bg}")
    return out


_TEMPLATE = """{% if not fragment %}<!doctype html>
<html><head><meta charset="utf-8"><title>Episode {{ r.id }}</title></head><body style="margin:0">
{% endif %}<div class="transcript" style="{{ S.page }}">
<h2 style="{{ S.h }}">Episode {{ r.id }}</h2>
<p><b>Status:</b> {{ r.status }}{% if r.error %} — {{ r.error }}{% endif %} · <b>trainable:</b> {{ r.trainable }} ·
<b>turns:</b> {{ r.turns }} · <b>tool calls:</b> {{ r.tool_calls }} · <b>policy:</b> {{ r.policy }} · <b>backend:</b> {{ r.backend }}
{% if r.labels %} · <b>labels:</b> {{ r.labels|join(", ") }}{% endif %}</p>
<p><b>Question:</b> {{ r.task.question }}{% if r.task.answers %}<br><b>Reference:</b> {{ r.task.answers|join(" | ") }}{% endif %}</p>
{% for m in r.messages %}
<div class="msg {{ m.role }}{% if m.intervention %} intervention{% endif %}" style="{% if m.intervention %}{{ S.intervention }}{% else %}{{ S['msg_' ~ m.role] or S.msg }}{% endif %}">
<div class="role" style="{{ S.role }}">{{ m.role }}{% if m.name %} · {{ m.name }}{% endif %} · turn {{ m.turn }}{% if m.intervention %}<span class="badge" style="{{ S.badge }}">harness intervention</span>{% endif %}</div>
{% if m.role == "system" %}<details><summary>system prompt</summary><pre style="{{ S.pre }}">{{ m.text() }}</pre></details>
{% else %}<pre style="{{ S.pre }}">{{ m.text() }}</pre>{% endif %}
{% for c in m.tool_calls %}<pre style="{{ S.pre }}">⚙ {{ c.name }}({{ c.arguments }})</pre>{% endfor %}
{% for ref in m.image_refs() %}<span class="imgbox" style="{{ S.imgbox }}"><img src="{{ img(ref) }}" alt="{{ ref }}" style="{{ S.img }}"><br>{{ ref }}</span>{% endfor %}
</div>
{% endfor %}
{% if r.final_response is not none %}<div class="final" style="{{ S.final }}"><b>Final response</b><pre style="{{ S.pre }}">{{ r.final_response }}</pre>
{% for f in r.cited_images %}<span class="imgbox" style="{{ S.imgbox }}"><img src="{{ img(f) }}" alt="{{ f }}" style="{{ S.img }}"><br>cited: {{ f }}</span>{% endfor %}</div>{% endif %}
<h3 style="{{ S.h }}">Events ({{ r.events|length }})</h3>
<table style="{{ S.table }}"><tr><th style="{{ S.cell }}">turn</th><th style="{{ S.cell }}">type</th><th style="{{ S.cell }}">detail</th></tr>
{% for e in r.events %}<tr><td style="{{ S.cell }}">{{ e.turn }}</td><td style="{{ S.cell }}">{{ e.type }}</td><td style="{{ S.cell }}">{{ e.detail }}</td></tr>{% endfor %}</table>
<h3 style="{{ S.h }}">Evidence registry ({{ r.images|length }})</h3>
<table style="{{ S.table }}"><tr>{% for h in ("ref", "file", "tool", "turn", "size", "source", "sha256") %}<th style="{{ S.cell }}">{{ h }}</th>{% endfor %}</tr>
{% for i in r.images %}<tr><td style="{{ S.cell }}">&lt;{{ i.ref }}&gt;</td><td style="{{ S.cell }}">{{ i.filename }}</td><td style="{{ S.cell }}">{{ i.tool or "user" }}</td><td style="{{ S.cell }}">{{ i.turn }}</td>
<td style="{{ S.cell }}">{{ i.width }}×{{ i.height }}</td><td style="{{ S.cell }}">{{ i.source_url or "" }}</td><td style="{{ S.cell }}">{{ i.sha256[:12] }}</td></tr>{% endfor %}</table>
</div>
{% if not fragment %}</body></html>{% endif %}"""

_SCRUB: ContextVar[Callable[[str], str] | None] = ContextVar("transcript_scrub", default=None)


def _portable(value: Any) -> Any:
    """Every text shown, with this machine's folders written portably (kit.view.paths, issue 18); the
    inlined images (``img()`` returns its ``data:`` URI as Markup) and already-escaped markup are left as
    they are. A question or observation that merely starts with ``data:`` is scrubbed like any text."""
    scrub = _SCRUB.get()
    if scrub is None or not isinstance(value, str) or isinstance(value, Markup):
        return value
    return scrub(value)


_ENV = Environment(autoescape=True, finalize=_portable)
_TPL = _ENV.from_string(_TEMPLATE)
_STYLES = _styles()


def render_transcript(rec: EpisodeRecord, workspace: str | Path | None = None, *, fragment: bool = False) -> str:
    """HTML of one episode; images are read from ``workspace`` (default: the record's) and inlined.
    ``fragment``: only the transcript's ``<div>``, for a notebook output (``display(HTML(...))``): a whole
    document's ``<title>`` shows as a stray line of text where a sanitizer (JupyterLab for an untrusted
    notebook, GitHub's preview) drops the tag but keeps its text. Styles are inline either way.
    A missing image file shows as a broken image with its name, never an error. No absolute path of
    this machine is shown: the repository, the data folder and the home folder are written
    ``results/...``, ``$MMSEARCH_KIT_DATA/...`` and ``~/...`` (:class:`kit.view.paths.PathScrubber`)."""
    ws = Path(workspace or rec.workspace or ".")

    def img(name: str) -> Markup | str:
        p = ws / name
        try:
            data = read_regular_file(p)  # never follows a symlink planted in the workspace
        except ImageError:
            return ""
        mime = mimetypes.guess_type(p.name)[0] or "image/png"
        # Markup: a real data URI (mime from mimetypes' table, base64 alphabet) is safe and is not scrubbed
        return Markup(f"data:{mime};base64,{base64.b64encode(data).decode()}")

    from kit.view.paths import PathScrubber  # lazy: the viewer package imports the harness

    token = _SCRUB.set(PathScrubber(html=False))  # raw text: autoescaped after scrubbing
    try:
        return _TPL.render(r=rec, img=img, S=_STYLES, fragment=fragment)
    finally:
        _SCRUB.reset(token)


def write_transcript(rec: EpisodeRecord, path: str | Path, workspace: str | Path | None = None) -> Path:
    """Write the transcript of ``rec`` to ``path`` (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_transcript(rec, workspace), encoding="utf-8")
    return path
