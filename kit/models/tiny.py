"""Tiny random-weight Qwen-VL checkpoints, built fully offline in seconds (docs/contracts.md "Profiles").

The ``smoke`` profile runs every notebook on 2 CPU cores with the same code paths as the ``paper``
profile (real Qwen2-VL / Qwen2.5-VL / Qwen3-VL classes, processor, chat template, tool calls). The
checkpoints built here stand in for the real models: same architecture classes and special-token
layout, a few layers of width 64–128, random weights (their outputs are junk by design).

Two vocabularies:

* ``vocab="qwen"``: the real Qwen BPE (:mod:`kit.models.qwen_tokenizer`), so prompts tokenize
  exactly like the real model (token budgets, V-Fold thresholds are realistic). With tied
  embeddings the model has ~20 M parameters, almost all in the 151,936 x 128 embedding.
* ``vocab="local"``: a small byte-level BPE trained here with ``tokenizers`` (~1k ids) carrying the
  Qwen special tokens; ~0.4 M parameters, for the fastest training smoke tests.

A checkpoint folder holds ``config.json``, ``generation_config.json``, ``model.safetensors``, the
tokenizer files with the chat template, and ``processor_config.json`` naming
:class:`kit.models.processor.QwenVLImageOnlyProcessor` (plus a ``video_processor`` section, which
servers using the stock processor class, e.g. vLLM, require). Load it with
``AutoModelForImageTextToText.from_pretrained(path)`` and, after ``import kit.models``,
``AutoProcessor.from_pretrained(path)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from kit.paths import cache_dir

Arch = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
Vocab = Literal["qwen", "local"]

ARCHS: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

#: Default image-size limits (pixels) of the tiny checkpoints: small so that vision runs fast on CPU.
#: Qwen2/2.5-VL: 4..256 vision tokens per image (28x28 px each); Qwen3-VL uses 32x32 px per token.
DEFAULT_MIN_PIXELS = 4 * 28 * 28
DEFAULT_MAX_PIXELS = 256 * 28 * 28

# Real-model vocabulary size of the embedding matrix (ids above the tokenizer's length are padding).
_QWEN_EMBED_ROWS = 151_936

# Bump when the checkpoint layout changes so cached folders are rebuilt.
_FORMAT_VERSION = 2
_META_NAME = "kit_tiny.json"

# Special tokens the local vocabulary carries, in Qwen's order; ids follow the learned BPE.
_LOCAL_EXTRA = ("<tool_response>", "</tool_response>", "<think>", "</think>")

# Training text for the local BPE (written for the kit): agent-style prompts, tool JSON, English,
# Chinese, code and digits, so common pieces of a search-agent prompt get merged.
_LOCAL_CORPUS = (
    "You are a helpful assistant. Answer the question by searching the web and looking at images.",
    "# Tools\n\nYou may call one or more functions to assist with the user query.",
    '<tool_call>\n{"name": "web_search", "arguments": {"query": "tallest building in Shanghai"}}\n</tool_call>',
    '<tool_call>\n{"name": "web_search_for_image", "arguments": {"query": "red panda", "num": 4}}\n</tool_call>',
    '{"name": "web_search_based_on_image", "arguments": {"image": "user_image_1.jpg"}}',
    '{"name": "web_extract", "arguments": {"urls": ["https://en.wikipedia.org/wiki/Paris"], "goal": "find"}}',
    '{"name": "execute_code", "arguments": {"code": "import math\\nprint(math.sqrt(2))"}}',
    "<tool_response>\nTitle: Shanghai Tower\nURL: https://en.wikipedia.org/wiki/Shanghai_Tower\n"
    "Snippet: The Shanghai Tower is a 632-metre, 128-storey megatall skyscraper in Lujiazui.\n</tool_response>",
    "The image shows a bridge over a river at sunset. The answer is 1937, the year it opened.",
    "Wikipedia is a free online encyclopedia, written and maintained by a community of volunteers.",
    "According to the search results, the painting was completed in 1503 and is held by the Louvre.",
    "上海中心大厦是位于中国上海浦东陆家嘴的一座超高层地标式摩天大楼。答案是632米。",
    "def search(query: str, num: int = 10) -> list[dict]:\n    return [hit for hit in hits if hit.score > 0.5]",
    "0 1 2 3 4 5 6 7 8 9 10 100 2024-05-17 3.14159 42% $1,000",
    "<think>\nThe user asks about the photo. I should run a reverse image search first.\n</think>",
    "Final answer: the bird in the picture is a kingfisher (Alcedo atthis). <search_image_3>",
)


class TinyCheckpointError(RuntimeError):
    """A tiny checkpoint could not be built or a cached one is incomplete."""


# --------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------
def _qwen_tokenizer(arch: str):
    from kit.models.qwen_tokenizer import shared_qwen_tokenizer

    # Read-only use (rendering and saving), so the process-wide instance is fine.
    return shared_qwen_tokenizer("qwen3" if arch == "qwen3_vl" else "qwen2_5")


def build_local_tokenizer(vocab_size: int = 1024):
    """Train the small byte-level BPE of ``vocab="local"`` checkpoints (~0.1 s).

    Same normalizer (NFC) and pre-tokenizer (Qwen regex + byte level) as the real Qwen tokenizer;
    the Qwen added tokens (and ``<tool_response>``, ``<think>`` pairs) follow the learned ids.
    Returns a ``PreTrainedTokenizerFast`` with the kit's Qwen-VL chat template.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from kit.models.qwen_tokenizer import QWEN_ADDED_TOKENS, QWEN_PRETOKENIZE_PATTERN, QWEN_VL_CHAT_TEMPLATE

    tok = Tokenizer(models.BPE(fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(list(_LOCAL_CORPUS) * 4, trainer=trainer)
    for content, special in QWEN_ADDED_TOKENS + tuple((t, False) for t in _LOCAL_EXTRA):
        token = AddedToken(content, special=special, normalized=False)
        (tok.add_special_tokens if special else tok.add_tokens)([token])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32_768,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    fast.chat_template = QWEN_VL_CHAT_TEMPLATE
    return fast


# --------------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------------
def _ids(tokenizer) -> dict[str, int]:
    names = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
        "eos_token_id": "<|im_end|>",
        "pad_token_id": "<|endoftext|>",
    }
    out = {}
    for key, tok in names.items():
        i = tokenizer.convert_tokens_to_ids(tok)
        if i is None:
            raise TinyCheckpointError(f"tokenizer lacks {tok}")
        out[key] = int(i)
    return out


def tiny_config(arch: Arch, vocab_size: int, ids: dict[str, int], hidden: int):
    """Architecture config of a tiny checkpoint (transformers 5 keys).

    ``hidden`` is the text width; attention heads are 32 wide (vLLM's CPU backend needs head size
    >= 32), 2 decoder layers, 2 vision blocks of width 64, spatial merge 2, temporal patch 2. M-RoPE
    sections sum to half the head dim (16): [4, 6, 6] for Qwen2/2.5-VL (same proportions as the real
    [16, 24, 24]) and [6, 5, 5] interleaved for Qwen3-VL. Qwen3-VL uses 16-pixel patches.
    """
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig

    head_dim = 32
    n_heads = hidden // head_dim
    text: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=n_heads,
        num_key_value_heads=max(1, n_heads // 2),
        max_position_embeddings=32_768,
        rms_norm_eps=1e-6,
        bos_token_id=ids["pad_token_id"],  # Qwen uses <|endoftext|> as BOS id (never prepended)
        eos_token_id=ids["eos_token_id"],
        pad_token_id=ids["pad_token_id"],
    )
    top = {k: ids[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    if arch == "qwen2_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [4, 6, 6]}
        vision = dict(
            depth=2, embed_dim=64, hidden_size=hidden, num_heads=2, mlp_ratio=2, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2,
        )  # fmt: skip
        return Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **top)
    if arch == "qwen2_5_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [4, 6, 6]}
        vision = dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=hidden, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
            tokens_per_second=2,
        )  # fmt: skip
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **top)
    if arch == "qwen3_vl":
        text["head_dim"] = head_dim
        text["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 5_000_000.0,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        }
        vision = dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=hidden, patch_size=16,
            spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=256,
            deepstack_visual_indexes=[1],
        )  # fmt: skip
        return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **top)
    raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")


def _image_processor(arch: str, min_pixels: int, max_pixels: int):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if arch == "qwen3_vl":  # Qwen3-VL: 16-px patches, [-1, 1] normalization
        mean, std, patch = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 16
    else:  # Qwen2/2.5-VL: CLIP statistics, 14-px patches
        mean, std, patch = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711], 14
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=patch,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=mean,
        image_std=std,
    )


def _video_processor_section(arch: str, image_processor) -> dict[str, Any]:
    # Written as data: instantiating the real video processor would import torchvision.
    return {
        "video_processor_type": "Qwen3VLVideoProcessor" if arch == "qwen3_vl" else "Qwen2VLVideoProcessor",
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": list(image_processor.image_mean),
        "image_std": list(image_processor.image_std),
        "rescale_factor": 1 / 255,
        "resample": 3,
        "size": dict(image_processor.size),
        "patch_size": image_processor.patch_size,
        "temporal_patch_size": image_processor.temporal_patch_size,
        "merge_size": image_processor.merge_size,
    }


# --------------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------------
def _default_dir(arch: str, vocab: str, seed: int, min_pixels: int, max_pixels: int) -> Path:
    name = f"{arch}-{vocab}-{seed}"
    if (min_pixels, max_pixels) != (DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS):
        name += f"-px{min_pixels}-{max_pixels}"
    return cache_dir() / "tiny" / name


def _spec(arch: str, vocab: str, seed: int, min_pixels: int, max_pixels: int) -> dict[str, Any]:
    return {
        "format": _FORMAT_VERSION,
        "arch": arch,
        "vocab": vocab,
        "seed": seed,
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
    }


_REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "processor_config.json",
    "chat_template.jinja",
    _META_NAME,
)


def is_complete(path: Path, spec: dict[str, Any] | None = None) -> bool:
    """True when ``path`` holds a finished tiny checkpoint (and, if given, built with ``spec``)."""
    if not all((path / f).is_file() for f in _REQUIRED_FILES):
        return False
    try:
        meta = json.loads((path / _META_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return spec is None or all(meta.get(k) == v for k, v in spec.items())


def build_tiny_checkpoint(
    arch: Arch,
    out_dir: str | os.PathLike | None = None,
    vocab: Vocab = "qwen",
    seed: int = 0,
    *,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    overwrite: bool = False,
) -> Path:
    """Build (or reuse) a tiny random-weight Qwen-VL checkpoint folder, fully offline.

    Args:
        arch: ``"qwen2_vl"``, ``"qwen2_5_vl"`` or ``"qwen3_vl"``.
        out_dir: target folder; default ``cache_dir()/tiny/<arch>-<vocab>-<seed>`` (a ``-px…``
            suffix is added for non-default pixel limits).
        vocab: ``"qwen"`` (real Qwen BPE, ~20 M params, ~80 MB) or ``"local"`` (small BPE,
            ~0.4 M params, ~2 MB).
        seed: weight-initialisation seed (same seed → identical weights).
        min_pixels, max_pixels: image-size limits of the processor in pixels (smart resize keeps the
            aspect ratio and lands on multiples of 28 px, or 32 px for Qwen3-VL).
        overwrite: rebuild even when a complete checkpoint with the same settings exists.

    Returns:
        The checkpoint folder. A folder that is complete and was built with the same settings is
        reused as is (~0 s); otherwise the build takes ~2–10 s on 2 CPU cores (first ``qwen`` build
        also converts the vocabulary, ~5 s, cached).

    Raises:
        ValueError: unknown ``arch``/``vocab`` or bad pixel limits.
        FileExistsError: an explicit ``out_dir`` exists, is not empty, is not a complete
            checkpoint with these settings, and ``overwrite`` is False (the default cache folder is
            rebuilt instead).
        TinyCheckpointError: the built checkpoint failed its consistency checks.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if vocab not in ("qwen", "local"):
        raise ValueError(f"unknown vocab {vocab!r}; expected 'qwen' or 'local'")
    if not (0 < min_pixels <= max_pixels):
        raise ValueError(f"need 0 < min_pixels <= max_pixels, got {min_pixels}, {max_pixels}")
    spec = _spec(arch, vocab, int(seed), int(min_pixels), int(max_pixels))
    target = Path(out_dir) if out_dir is not None else _default_dir(arch, vocab, seed, min_pixels, max_pixels)
    if target.exists() and not overwrite:
        if is_complete(target, spec):
            return target
        # The kit owns the default cache folder: stale or partial builds there are simply rebuilt.
        if out_dir is not None and target.is_dir() and any(target.iterdir()):
            raise FileExistsError(
                f"{target} exists and is not a complete tiny checkpoint built with {spec}; "
                "pass overwrite=True or another out_dir"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _write_checkpoint(staging, spec)
        if target.exists():
            shutil.rmtree(target)
        try:
            os.replace(staging, target)
        except OSError:
            # Another process finished the same build first: use its copy if it is complete.
            if is_complete(target, spec):
                return target
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_checkpoint(out: Path, spec: dict[str, Any]) -> None:
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from kit.models.processor import QwenVLImageOnlyProcessor

    t0 = time.perf_counter()
    arch, vocab = spec["arch"], spec["vocab"]
    tokenizer = _qwen_tokenizer(arch) if vocab == "qwen" else build_local_tokenizer()
    ids = _ids(tokenizer)
    if vocab == "qwen":
        rows, hidden = _QWEN_EMBED_ROWS, 128
    else:
        rows, hidden = -(-len(tokenizer) // 64) * 64, 64  # round up to a multiple of 64
    if len(tokenizer) > rows:
        raise TinyCheckpointError(f"tokenizer has {len(tokenizer)} ids but the embedding only {rows} rows")
    config = tiny_config(arch, rows, ids, hidden)

    with torch.random.fork_rng(devices=[]):  # seed the init without disturbing the caller's RNG
        torch.manual_seed(spec["seed"])
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.eval()
    model.generation_config = GenerationConfig(
        bos_token_id=ids["pad_token_id"],
        eos_token_id=[ids["eos_token_id"], ids["pad_token_id"]],
        pad_token_id=ids["pad_token_id"],
    )
    with quiet_hf_progress():
        model.save_pretrained(out)

    image_processor = _image_processor(arch, spec["min_pixels"], spec["max_pixels"])
    processor = QwenVLImageOnlyProcessor(image_processor, tokenizer, chat_template=tokenizer.chat_template)
    processor.save_pretrained(out)

    # The tokenizer class stays the generic fast one transformers writes ("TokenizersBackend"):
    # tokenizer.json is then loaded as is (Qwen2Tokenizer would rebuild it from vocab and merges in
    # Python, ~0.6 s slower for the 151k-merge vocabulary). The round trip is checked below.
    tcfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text())
    tcfg["processor_class"] = QwenVLImageOnlyProcessor.__name__
    tcfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False))
    pcfg_path = out / "processor_config.json"
    pcfg = json.loads(pcfg_path.read_text())
    pcfg["video_processor"] = _video_processor_section(arch, image_processor)
    pcfg_path.write_text(json.dumps(pcfg, indent=2, ensure_ascii=False))

    _check_roundtrip(out, tokenizer)
    # mkdtemp made the staging folder private; a model folder is meant to be shared read-only.
    out.chmod(0o755)
    for f in out.iterdir():
        f.chmod(0o644)
    n_params = sum(p.numel() for p in model.parameters())
    meta = dict(spec, params=n_params, build_seconds=round(time.perf_counter() - t0, 3), tokenizer_len=len(tokenizer))
    (out / _META_NAME).write_text(json.dumps(meta, indent=1))


@contextlib.contextmanager
def quiet_hf_progress():
    """Hide transformers' per-shard progress bar while saving (noise in notebooks and test logs)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _check_roundtrip(out: Path, tokenizer) -> None:
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(out))
    probe = (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Who built it in 1889? 埃菲尔铁塔 "
        '<tool_call>\n{"name": "web_search", "arguments": {"query": "x"}}\n</tool_call><|im_end|>\n'
    )
    a, b = tokenizer.encode(probe), loaded.encode(probe)
    if a != b or len(loaded) != len(tokenizer):
        raise TinyCheckpointError(f"saved tokenizer in {out} does not reproduce the built one")


def tiny_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The build record (arch, vocab, seed, pixel limits, params, build seconds) of a tiny checkpoint.

    Raises:
        TinyCheckpointError: ``path`` is not a complete tiny checkpoint.
    """
    p = Path(path)
    if not is_complete(p):
        raise TinyCheckpointError(f"{p} is not a complete tiny checkpoint")
    return json.loads((p / _META_NAME).read_text())
