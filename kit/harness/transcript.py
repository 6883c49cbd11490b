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

_TEMPLATE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Episode {{ r.id }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:980px;margin:1.5em auto;color:#222}
.msg{border:1px solid #ddd;border-radius:6px;margin:.6em 0;padding:.5em .8em}
.system{background:#f7f7f7}.user{background:#eef5ff}.assistant{background:#f3fff0}.tool{background:#fffbea}
.intervention{border:2px dashed #d9480f;background:#fff1ec}
.role{font-weight:600;font-size:.85em;color:#555}.badge{background:#d9480f;color:#fff;border-radius:3px;padding:0 .4em;font-size:.75em;margin-left:.5em}
pre{white-space:pre-wrap;word-wrap:break-word;margin:.3em 0;font-size:.85em}
img{max-width:300px;max-height:300px;border:1px solid #ccc;margin:.2em}
.imgbox{display:inline-block;text-align:center;font-size:.75em;vertical-align:top}
table{border-collapse:collapse;font-size:.8em}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left}
.final{border:2px solid #2b8a3e;background:#ebfbee;padding:.6em;border-radius:6px}
</style></head><body>
<h2>Episode {{ r.id }}</h2>
<p><b>Status:</b> {{ r.status }}{% if r.error %} — {{ r.error }}{% endif %} · <b>trainable:</b> {{ r.trainable }} ·
<b>turns:</b> {{ r.turns }} · <b>tool calls:</b> {{ r.tool_calls }} · <b>policy:</b> {{ r.policy }} · <b>backend:</b> {{ r.backend }}
{% if r.labels %} · <b>labels:</b> {{ r.labels|join(", ") }}{% endif %}</p>
<p><b>Question:</b> {{ r.task.question }}{% if r.task.answers %}<br><b>Reference:</b> {{ r.task.answers|join(" | ") }}{% endif %}</p>
{% for m in r.messages %}
<div class="msg {{ m.role }}{% if m.intervention %} intervention{% endif %}">
<div class="role">{{ m.role }}{% if m.name %} · {{ m.name }}{% endif %} · turn {{ m.turn }}{% if m.intervention %}<span class="badge">harness intervention</span>{% endif %}</div>
{% if m.role == "system" %}<details><summary>system prompt</summary><pre>{{ m.text() }}</pre></details>
{% else %}<pre>{{ m.text() }}</pre>{% endif %}
{% for c in m.tool_calls %}<pre>⚙ {{ c.name }}({{ c.arguments }})</pre>{% endfor %}
{% for ref in m.image_refs() %}<span class="imgbox"><img src="{{ img(ref) }}" alt="{{ ref }}"><br>{{ ref }}</span>{% endfor %}
</div>
{% endfor %}
{% if r.final_response is not none %}<div class="final"><b>Final response</b><pre>{{ r.final_response }}</pre>
{% for f in r.cited_images %}<span class="imgbox"><img src="{{ img(f) }}" alt="{{ f }}"><br>cited: {{ f }}</span>{% endfor %}</div>{% endif %}
<h3>Events ({{ r.events|length }})</h3>
<table><tr><th>turn</th><th>type</th><th>detail</th></tr>
{% for e in r.events %}<tr><td>{{ e.turn }}</td><td>{{ e.type }}</td><td>{{ e.detail }}</td></tr>{% endfor %}</table>
<h3>Evidence registry ({{ r.images|length }})</h3>
<table><tr><th>ref</th><th>file</th><th>tool</th><th>turn</th><th>size</th><th>source</th><th>sha256</th></tr>
{% for i in r.images %}<tr><td>&lt;{{ i.ref }}&gt;</td><td>{{ i.filename }}</td><td>{{ i.tool or "user" }}</td><td>{{ i.turn }}</td>
<td>{{ i.width }}×{{ i.height }}</td><td>{{ i.source_url or "" }}</td><td>{{ i.sha256[:12] }}</td></tr>{% endfor %}</table>
</body></html>"""

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


def render_transcript(rec: EpisodeRecord, workspace: str | Path | None = None) -> str:
    """HTML of one episode; images are read from ``workspace`` (default: the record's) and inlined.
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
        return _TPL.render(r=rec, img=img)
    finally:
        _SCRUB.reset(token)


def write_transcript(rec: EpisodeRecord, path: str | Path, workspace: str | Path | None = None) -> Path:
    """Write the transcript of ``rec`` to ``path`` (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_transcript(rec, workspace), encoding="utf-8")
    return path
