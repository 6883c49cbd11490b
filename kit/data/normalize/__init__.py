"""Open-source trajectory normalization (WeAgent §4.5): adapters to the episode-record contract.

Sources and where to load them (Hugging Face Hub ids; the Hub is unreachable in CI, so tests use
the real MMSearch-R1 traces under ``../shared/data/trajectories/mmsearch_r1/`` and format-true rows):

* MMSearch-R1 traces — :class:`MMSearchR1Adapter`, prefix ``MMR1_`` (stayreal233/MMSearch-R1-Reproduction
  prediction files; the official training rows are ``lmms-lab/FVQA`` / EvolvingLMMs-Lab releases);
* Metis — :class:`ChatAdapter` with :data:`METIS`, prefix ``METIS_`` (``Accio-Lab/Metis-ColdStart``:
  ``messages`` as a JSON string, ``images`` as base64 strings);
* OpenSearch-VL — :data:`OPENSEARCH_VL`, prefix ``OSVL_`` (``OpenSearch-VL/Search-VL-SFT-36K``,
  RL prompts ``OpenSearch-VL/Search-VL-RL-8K``);
* REDSearcher — :data:`REDSEARCHER`, prefix ``RED_`` (``honglyhly/REDSearcher_MM_SFT_5K`` multimodal
  SFT, ``Zchu/REDSearcher_SFT_10K`` text SFT, both in ms-swift / ShareGPT layout; RL prompts
  ``Zchu/REDSearcher_RL_1K``; linked from github.com/RedSearchAgent/REDSearcher).
"""

from kit.data.normalize.base import (
                                     NormalizeError,
                                     NormalizeReport,
                                     canonical_call,
                                     canonical_response,
                                     garbled,
                                     normalize_rows,
                                     token_filter,
)
from kit.data.normalize.chat import METIS, OPENSEARCH_VL, REDSEARCHER, ChatAdapter, ChatSource
from kit.data.normalize.mmsearch_r1 import MMSearchR1Adapter, read_mmsearch_r1
from kit.data.normalize.sources import source_rows

__all__ = ["NormalizeError", "NormalizeReport", "canonical_call", "canonical_response", "garbled", "normalize_rows",
           "token_filter", "ChatAdapter", "ChatSource", "METIS", "OPENSEARCH_VL", "REDSEARCHER", "MMSearchR1Adapter",
           "read_mmsearch_r1", "source_rows"]
