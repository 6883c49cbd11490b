"""On-policy distillation (Long-MDR's OPD warmup): the student samples, the teacher scores its tokens.

The student's own trajectories (sampled through the harness) are re-tokenized with
:class:`~kit.train.sft_data.SFTEncoder`; on every model-generated token the per-token reverse KL
``KL(π_s ‖ π_t) = Σ_v π_s(v) (log π_s(v) − log π_t(v))`` is minimized:

* :func:`reverse_kl_full` — the exact per-token KL from both full next-token distributions (an
  in-process teacher sharing the student's tokenizer);
* :func:`reverse_kl_sampled` — the single-sample estimate from the teacher's log-prob of the sampled
  token only (an endpoint teacher): the surrogate ``sg(log π_s(a) − log π_t(a)) · log π_s(a)`` has the
  reverse-KL gradient in expectation over ``a ~ π_s`` (the ``E[∇ log π_s] = 0`` term dropped).

Teachers: :class:`InProcessTeacher` (transformers model) and :class:`EndpointTeacher` (vLLM's
OpenAI-compatible ``/v1/completions`` with ``prompt_logprobs``; text-only, since a token-id prompt carries
no pixels).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.extras import RL_FEATURE, import_extra


class TeacherError(RuntimeError):
    """The teacher could not score a trajectory (endpoint failure, unsupported input, vocab mismatch)."""


def reverse_kl_full(student_lsm, teacher_lsm, row_index=None, n_rows: int | None = None):
    """Exact per-token reverse KL, averaged over each trajectory's tokens, then over trajectories.

    Args:
        student_lsm: ``[N, V]`` student log-probs at the ``N`` generated positions (with grad).
        teacher_lsm: ``[N, V]`` teacher log-probs (no grad), same vocabulary.
        row_index: ``[N]`` trajectory of each position (None: one trajectory).
    Returns: ``(loss, kl_mean)``: the loss tensor and the mean per-token KL (float, nats).
    Raises: ValueError: shape mismatch (different vocabularies).
    """

    if student_lsm.shape != teacher_lsm.shape:
        raise ValueError(f"student {tuple(student_lsm.shape)} and teacher {tuple(teacher_lsm.shape)} log-probs differ "
                         "in shape (different vocabularies? use reverse_kl_sampled)")
    kl = (student_lsm.exp() * (student_lsm - teacher_lsm)).sum(-1)  # [N]
    loss = _per_row_mean(kl, row_index, n_rows)
    return loss, float(kl.detach().mean()) if kl.numel() else float("nan")


def reverse_kl_sampled(student_logp, teacher_logp, row_index=None, n_rows: int | None = None):
    """Single-sample reverse-KL surrogate on the sampled tokens.

    Args: ``student_logp``/``teacher_logp``: ``[N]`` log-probs of the sampled tokens (student with grad).
    Returns: ``(loss, kl_mean)`` with ``kl_mean`` the mean of ``log π_s − log π_t`` (an unbiased KL estimate).
    """
    k = (student_logp - teacher_logp).detach()
    loss = _per_row_mean(k * student_logp, row_index, n_rows)
    return loss, float(k.mean()) if k.numel() else float("nan")


def _per_row_mean(x, row_index, n_rows):
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    if row_index is None:
        return x.mean()
    n = int(n_rows if n_rows is not None else int(row_index.max()) + 1)
    sums = torch.zeros(n, dtype=x.dtype, device=x.device).index_add(0, row_index, x)
    counts = torch.zeros(n, dtype=x.dtype, device=x.device).index_add(0, row_index, torch.ones_like(x))
    keep = counts > 0
    return (sums[keep] / counts[keep]).mean()


def row_index_of(mask):
    """``[N]`` batch row of each True position of a ``[B, T]`` mask (row-major, as ``x[mask]`` orders)."""
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    return torch.nonzero(mask)[:, 0]


class InProcessTeacher:
    """A transformers teacher model, frozen, on the student's device.

    Args:
        model_or_path: a loaded model or a checkpoint folder.
    """

    def __init__(self, model_or_path: Any, device: str = "cpu", dtype=None):
        torch = import_extra("train", "torch", feature=RL_FEATURE)

        if isinstance(model_or_path, (str, Path)):
            from transformers import AutoModelForImageTextToText

            model_or_path = AutoModelForImageTextToText.from_pretrained(str(model_or_path), dtype=dtype or torch.float32)
        self.model = model_or_path.to(device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.name = f"in-process:{getattr(self.model.config, 'name_or_path', '') or type(self.model).__name__}"

    def log_softmax(self, batch: dict[str, Any], temperature: float = 1.0):
        """``(log_probs [N, V], taken [N], mask)`` at the generated positions (no grad)."""
        torch = import_extra("train", "torch", feature=RL_FEATURE)

        from kit.rl.logprobs import masked_log_softmax

        with torch.no_grad():
            return masked_log_softmax(self.model, batch, temperature=temperature)


class EndpointTeacher:
    """Teacher behind a vLLM OpenAI-compatible server: ``POST /v1/completions`` with the token ids as
    the prompt, ``max_tokens=1`` and ``prompt_logprobs=0`` returns the log-prob of every prompt token.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``; ``model``: served model name.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 transport=None):
        self.transport = transport  # an httpx transport (tests, proxies); None = real network
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.name = f"endpoint:{model}"

    async def prompt_logprobs(self, input_ids: list[int]) -> list[float | None]:
        """Log-prob of each prompt token given the previous ones (``None`` for the first).

        Raises:
            TeacherError: HTTP failure or a reply without ``prompt_logprobs``.
        """
        import httpx

        body = {"model": self.model, "prompt": list(map(int, input_ids)), "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 0}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, transport=self.transport) as client:
                r = await client.post(f"{self.base_url}/completions", json=body, headers=headers)
                r.raise_for_status()
                data = r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise TeacherError(f"teacher endpoint failed: {type(e).__name__}: {e}") from e
        try:
            plp = data["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError) as e:
            raise TeacherError("teacher reply has no choices[0].prompt_logprobs (server without prompt_logprobs "
                               "support?)") from e
        if not isinstance(plp, list) or len(plp) != len(input_ids):
            raise TeacherError(f"teacher returned {len(plp) if isinstance(plp, list) else 'no'} prompt log-probs for "
                               f"{len(input_ids)} tokens")
        out: list[float | None] = []
        for tok, entry in zip(input_ids, plp):
            if entry is None:
                out.append(None)
                continue
            lp = (entry.get(str(int(tok))) or entry.get(int(tok))) if isinstance(entry, dict) else None
            if lp is None:
                raise TeacherError(f"teacher log-probs lack the prompt token {tok}")
            out.append(float(lp["logprob"] if isinstance(lp, dict) else lp))
        return out

    async def sampled_logprobs(self, example) -> Any:
        """``[L-1]`` teacher log-probs aligned with :func:`kit.rl.logprobs.token_logprobs` positions
        (position ``t`` scores token ``t+1``) for one :class:`~kit.train.sft_data.SFTExample`.

        Raises:
            TeacherError: the example has images (a token-id prompt cannot carry them), or endpoint errors.
        """
        torch = import_extra("train", "torch", feature=RL_FEATURE)

        if example.pixel_values is not None:
            raise TeacherError(f"{example.id}: an endpoint teacher scores text-only trajectories (token-id prompts "
                               "carry no pixels); use an in-process teacher for trajectories with images")
        lp = await self.prompt_logprobs(example.input_ids.tolist())
        return torch.tensor([float("nan") if v is None else v for v in lp[1:]], dtype=torch.float32)
