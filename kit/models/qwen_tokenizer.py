"""Offline Qwen tokenizer: the real Qwen BPE vocabulary as a Hugging Face fast tokenizer.

The Hugging Face Hub is not reachable on CPU/CI machines, but the real Qwen byte-level BPE
(``qwen.tiktoken``: 151,643 ranks) ships inside the PyPI package ``dashscope==2.0.2``. This module
converts it once into a ``tokenizer.json`` (cached under ``kit.paths.cache_dir()/qwen_tokenizer``),
with Qwen's own pre-tokenizer regex (single digits), an NFC normalizer and the 22 Qwen2.5-VL added
tokens in their real ids (151643–151664). Prompts then tokenize exactly like the real Qwen2-VL /
Qwen2.5-VL / Qwen3-VL models, which gives real token counts for the context budgets (Table 5:
32,768 context tokens) and V-Fold's threshold τ (POINTS-Seeker §3), and vocabularies for tiny
checkpoints whose prompts tokenize like the real ones.

The chat template (:data:`QWEN_VL_CHAT_TEMPLATE`) renders the Qwen2.5 tool block (the stock Qwen2-VL
template silently drops tools), images as ``<|vision_start|><|image_pad|><|vision_end|>``, tool
results as ``<tool_response>`` blocks inside one user turn, and renders earlier turns identically
as turns are appended (so a conversation prefix keeps its tokens across generations). Without a
system message it uses the template variable ``default_system`` (default "You are a helpful
assistant."); tool-call ``arguments`` given as a string are written verbatim, mappings as JSON.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Literal

from kit.paths import cache_dir, file_sha256

# Qwen's pre-tokenizer pattern. It differs from tiktoken's cl100k pattern in one place: numbers are
# split into single digits (``\p{N}``), not groups of up to three.
QWEN_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Number of BPE ranks in ``qwen.tiktoken``; added tokens start at this id.
QWEN_BPE_SIZE = 151_643

#: The 22 added tokens of Qwen2.5-VL in id order (151643–151664), with their ``special`` flag.
#: As in Qwen2.5, the tool-call and FIM markers are added (atomic) but not special, so decoding with
#: ``skip_special_tokens=True`` keeps ``<tool_call>`` blocks.
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)

#: Extra added tokens of the Qwen3 / Qwen3-VL vocabulary (151665–151668), appended after the 22.
QWEN3_EXTRA_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

# Written for this kit. Output format follows the Qwen2.5 / Qwen2.5-VL chat protocol (ChatML turns, the
# "# Tools" system block, <tool_call>/<tool_response> blocks). Every tag strips surrounding template
# whitespace ({%- -%}), so the output is only the quoted strings and message contents; the
# {% generation %} block marks exactly what the assistant generates (its content through
# <|im_end|>) for assistant-only loss masks.
QWEN_VL_CHAT_TEMPLATE = r"""
{%- macro render_content(content) -%}
  {%- if content is none -%}
  {%- elif content is string -%}
    {{- content -}}
  {%- else -%}
    {%- for part in content -%}
      {%- if part is string -%}
        {{- part -}}
      {%- elif part.type == 'text' -%}
        {{- part.text if part.text is not none else '' -}}
      {%- elif part.type == 'image' or part.type == 'image_url' -%}
        {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
      {%- elif part.type == 'video' -%}
        {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
      {%- else -%}
        {{- raise_exception('unsupported content part type: ' ~ part.type) -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system_text = render_content(messages[0].content) -%}
  {%- set skip_first = true -%}
{%- else -%}
  {%- set system_text = default_system if default_system is defined else 'You are a helpful assistant.' -%}
  {%- set skip_first = false -%}
{%- endif -%}
{{- '<|im_start|>system\n' + system_text -}}
{%- if tools -%}
  {{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}
    {{- '\n' + (tool | tojson) -}}
  {%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
  {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
  {{- '\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for message in messages -%}
  {%- if loop.first and skip_first -%}
  {%- elif message.role == 'user' or message.role == 'system' -%}
    {{- '<|im_start|>' + message.role + '\n' + render_content(message.content) + '<|im_end|>\n' -}}
  {%- elif message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- generation -%}
      {%- set body = render_content(message.content) -%}
      {{- body -}}
      {%- if message.tool_calls -%}
        {%- for call in message.tool_calls -%}
          {%- set fn = call.function if call.function is defined else call -%}
          {%- if body or not loop.first -%}
            {{- '\n' -}}
          {%- endif -%}
          {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
          {%- if fn.arguments is string -%}
            {{- fn.arguments -}}
          {%- else -%}
            {{- fn.arguments | tojson -}}
          {%- endif -%}
          {{- '}\n</tool_call>' -}}
        {%- endfor -%}
      {%- endif -%}
      {{- '<|im_end|>' -}}
    {%- endgeneration -%}
    {{- '\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\n<tool_response>\n' + render_content(message.content) + '\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- else -%}
    {{- raise_exception('unsupported message role: ' ~ message.role) -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()

# Bump when the cached tokenizer.json layout changes, so stale caches are rebuilt.
_FORMAT_VERSION = 1
_BUILD_LOCK = threading.Lock()


class QwenVocabularyNotFound(FileNotFoundError):
    """``qwen.tiktoken`` was not found (``dashscope==2.0.2`` is not installed and no path was given)."""


def find_qwen_tiktoken() -> Path:
    """Locate ``qwen.tiktoken`` inside the installed ``dashscope`` package without importing it.

    Returns:
        Path to the BPE rank file (151,643 base64 ``token rank`` lines, ~2.5 MB).

    Raises:
        QwenVocabularyNotFound: ``dashscope`` is not installed or lacks the file.
    """
    override = os.environ.get("MMSEARCH_KIT_QWEN_TIKTOKEN")
    if override:
        p = Path(override).expanduser()
        if not p.is_file():
            raise QwenVocabularyNotFound(f"MMSEARCH_KIT_QWEN_TIKTOKEN={override} is not a file")
        return p
    spec = importlib.util.find_spec("dashscope")
    if spec is None or not spec.submodule_search_locations:
        raise QwenVocabularyNotFound(
            "the Qwen BPE vocabulary ships in the PyPI package dashscope==2.0.2; "
            "install it without its dependencies (pip install --no-deps -r requirements/qwen-vocab.txt, "
            "as make setup does) or set MMSEARCH_KIT_QWEN_TIKTOKEN"
        )
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "resources" / "qwen.tiktoken"
        if p.is_file():
            return p
    raise QwenVocabularyNotFound(
        f"dashscope is installed at {list(spec.submodule_search_locations)} but has no "
        "resources/qwen.tiktoken (the kit needs dashscope==2.0.2)"
    )


def is_qwen_vocab_available() -> bool:
    """Whether :func:`find_qwen_tiktoken` finds the vocabulary (tests and notebooks gate on it; it never
    imports ``dashscope``, which ``make setup`` installs with ``--no-deps`` so that importing it fails)."""
    try:
        find_qwen_tiktoken()
    except QwenVocabularyNotFound:
        return False
    return True


def _added_tokens(flavor: str) -> tuple[tuple[str, bool], ...]:
    if flavor == "qwen2_5":
        return QWEN_ADDED_TOKENS
    if flavor == "qwen3":
        return QWEN_ADDED_TOKENS + QWEN3_EXTRA_TOKENS
    raise ValueError(f"unknown Qwen tokenizer flavor {flavor!r} (expected 'qwen2_5' or 'qwen3')")


def build_qwen_tokenizer_json(vocab_file: Path, flavor: str = "qwen2_5"):
    """Convert ``qwen.tiktoken`` into a ``tokenizers.Tokenizer`` (not cached; ~5–10 s).

    Uses ``transformers.convert_slow_tokenizer.TikTokenConverter`` for the vocabulary and merges
    (recovering merges from ranks is exactly what it does) and replaces its default pattern with
    Qwen's. Returns the ``tokenizers.Tokenizer``; ids 0..151642 are the BPE ranks, then the added
    tokens of ``flavor`` in order.
    """
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(vocab_file), pattern=QWEN_PRETOKENIZE_PATTERN).converted()
    if tok.get_vocab_size(with_added_tokens=False) != QWEN_BPE_SIZE:
        raise ValueError(
            f"{vocab_file} has {tok.get_vocab_size(with_added_tokens=False)} ranks, expected {QWEN_BPE_SIZE}"
        )
    tok.normalizer = normalizers.NFC()
    for i, (content, special) in enumerate(_added_tokens(flavor)):
        token = AddedToken(content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        got = tok.token_to_id(content)
        if got != QWEN_BPE_SIZE + i:
            raise ValueError(f"added token {content} got id {got}, expected {QWEN_BPE_SIZE + i}")
    return tok




def qwen_tokenizer_json(flavor: Literal["qwen2_5", "qwen3"] = "qwen2_5", *, rebuild: bool = False) -> Path:
    """Return the path of the cached ``tokenizer.json`` for ``flavor``, building it on first use.

    The cache lives in ``cache_dir()/qwen_tokenizer/<flavor>/`` with a ``meta.json`` that records
    the sha256 of the source vocabulary and a format version; a mismatch triggers a rebuild.
    Writes are atomic (temp file + rename), so concurrent processes never see a partial file.

    Raises:
        QwenVocabularyNotFound: see :func:`find_qwen_tiktoken`.
        ValueError: unknown flavor, or the vocabulary file is not the expected Qwen BPE.
    """
    _added_tokens(flavor)  # validate early
    vocab_file = find_qwen_tiktoken()
    out_dir = cache_dir() / "qwen_tokenizer" / flavor
    out_json, meta_path = out_dir / "tokenizer.json", out_dir / "meta.json"
    with _BUILD_LOCK:
        src_sha = None
        if not rebuild and out_json.is_file() and meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, json.JSONDecodeError):
                meta = {}
            # Cheap check first (size + mtime), full hash only when those differ.
            st = vocab_file.stat()
            if meta.get("format") == _FORMAT_VERSION and meta.get("source_size") == st.st_size:
                if meta.get("source_mtime") == st.st_mtime or meta.get("source_sha256") == (
                    src_sha := file_sha256(vocab_file)
                ):
                    return out_json
        out_dir.mkdir(parents=True, exist_ok=True)
        tok = build_qwen_tokenizer_json(vocab_file, flavor)
        st = vocab_file.stat()
        fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".json.tmp")
        os.close(fd)
        try:
            tok.save(tmp)
            os.replace(tmp, out_json)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        meta = {
            "format": _FORMAT_VERSION,
            "flavor": flavor,
            "source": str(vocab_file),
            "source_size": st.st_size,
            "source_mtime": st.st_mtime,
            "source_sha256": src_sha or file_sha256(vocab_file),
        }
        tmp_meta = meta_path.with_suffix(".json.tmp")
        tmp_meta.write_text(json.dumps(meta, indent=1))
        os.replace(tmp_meta, meta_path)
        return out_json


def load_qwen_tokenizer(flavor: Literal["qwen2_5", "qwen3"] = "qwen2_5", *, model_max_length: int = 32_768):
    """Load the offline real Qwen tokenizer (a fresh ``PreTrainedTokenizerFast`` each call).

    Args:
        flavor: ``"qwen2_5"`` (Qwen2-VL / Qwen2.5-VL: 22 added tokens, 151,665 ids) or ``"qwen3"``
            (Qwen3-VL: also ``<tool_response>``, ``</tool_response>``, ``<think>``, ``</think>``;
            151,669 ids).
        model_max_length: recorded on the tokenizer (Table 5 context: 32,768 tokens).

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token="<|im_end|>"``,
        ``pad_token="<|endoftext|>"`` and :data:`QWEN_VL_CHAT_TEMPLATE` as its chat template.
        First call builds and caches ``tokenizer.json`` (~5–10 s); later calls load it (~0.5 s).

    Raises:
        QwenVocabularyNotFound: ``dashscope==2.0.2`` is not installed.
    """
    from transformers import PreTrainedTokenizerFast

    path = qwen_tokenizer_json(flavor)
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        padding_side="left",
    )
    tok.chat_template = QWEN_VL_CHAT_TEMPLATE
    return tok


@functools.lru_cache(maxsize=2)
def shared_qwen_tokenizer(flavor: Literal["qwen2_5", "qwen3"] = "qwen2_5"):
    """One process-wide :func:`load_qwen_tokenizer` instance per flavor (loading costs ~1 s).

    For read-only use (counting, rendering, saving into checkpoints): callers must not add tokens
    or change its settings; use :func:`load_qwen_tokenizer` for a private copy.
    """
    return load_qwen_tokenizer(flavor)


def load_qwen_tiktoken_encoding(flavor: Literal["qwen2_5", "qwen3"] = "qwen2_5"):
    """The same vocabulary as a ``tiktoken.Encoding`` (reference implementation for tests/benchmarks).

    Special tokens get the same ids as in :func:`load_qwen_tokenizer`.
    """
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(find_qwen_tiktoken()))
    special = {content: QWEN_BPE_SIZE + i for i, (content, _) in enumerate(_added_tokens(flavor))}
    return tiktoken.Encoding(
        name=f"qwen-{flavor}",
        pat_str=QWEN_PRETOKENIZE_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=special,
    )
