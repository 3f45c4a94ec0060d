"""A checkpoint's `tokenizer/` directory -> token ids, through the `tokenizers` library directly.

Laya tokenizes with transformers' fast tokenizer over the same `tokenizer.json`. Its decision rows
encode with `add_special_tokens=False`: the special tokens are placed by the layout, not the
tokenizer. Its embedder (`embed_fn_from_agent`) is the one caller that lets the tokenizer frame a
text: the special tokens `tokenizer.json`'s post-processor adds, whichever they are, and
transformers' truncation (`encode_framed`). Any truncation or padding saved in `tokenizer.json`
is switched off, as transformers does for a call that asks for none.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence

from .errors import TokenizerError

_ROLES = ("cls_token", "sep_token", "pad_token", "mask_token")
SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")
"""transformers' special-token attributes, in its order (`all_special_tokens` lists them so)."""
UNBOUNDED = int(1e30)
"""transformers' `model_max_length` for a tokenizer whose config names none."""


def _token_text(value: object) -> Optional[str]:
    """A special token written as a string or as an `{"content": ...}` object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        content = value.get("content")
        if isinstance(content, str):
            return content
    return None


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise TokenizerError("%s does not parse as JSON: %s" % (path, e)) from e
    return data if isinstance(data, dict) else {}


class Tokenizer:
    """Encodes text to ids without special tokens and knows the four special tokens' ids."""

    def __init__(self, directory: str):
        from tokenizers import Tokenizer as _Fast

        path = os.path.join(directory, "tokenizer.json")
        if not os.path.isfile(path):
            raise TokenizerError("the checkpoint has no tokenizer: %s is missing" % path)
        try:
            self._tok = _Fast.from_file(path)
        except Exception as e:  # the Rust side raises a bare Exception
            raise TokenizerError("%s does not load as a tokenizer: %s" % (path, e)) from e
        self._tok.no_truncation()
        self._tok.no_padding()
        config = _read_json(os.path.join(directory, "tokenizer_config.json"))
        special_map = _read_json(os.path.join(directory, "special_tokens_map.json"))
        texts: Dict[str, str] = {}
        for role in SPECIAL_ROLES:
            text = _token_text(config.get(role)) or _token_text(special_map.get(role))
            if text is not None:
                texts[role] = text
        missing = [role for role in _ROLES if role not in texts]
        if missing:
            raise TokenizerError(
                "%s: %s not named in tokenizer_config.json or special_tokens_map.json; Laya's "
                "layout needs all four of cls, sep, pad and mask" % (directory, ", ".join(missing)))
        ids: Dict[str, int] = {}
        for role in _ROLES:
            text = texts[role]
            token_id = self._tok.token_to_id(text)
            if token_id is None:
                raise TokenizerError("%s: the %s %r is not in the vocabulary of tokenizer.json"
                                     % (directory, role, text))
            ids[role] = token_id
        self.mask_text: str = texts["mask_token"]
        self.cls_id: int = ids["cls_token"]
        self.sep_id: int = ids["sep_token"]
        self.pad_id: int = ids["pad_token"]
        self.mask_id: int = ids["mask_token"]
        self.vocab_size: int = self._tok.get_vocab_size(with_added_tokens=True)
        self.frame_tokens: int = self._tok.num_special_tokens_to_add(False)
        """How many special tokens the post-processor adds around one text (0: none)."""
        self.special_texts: Dict[str, str] = texts
        """Each special-token role the tokenizer's config names (`SPECIAL_ROLES`) -> its text."""
        limit = config.get("model_max_length")
        self.model_max_length: int = (limit if isinstance(limit, int) and
                                      not isinstance(limit, bool) else UNBOUNDED)
        """The config's `model_max_length`: where transformers cuts `truncation=True` alone."""

    @property
    def library(self) -> Any:
        """The `tokenizers.Tokenizer` underneath, for callers that need the library's own API
        (Laya's `Agent.tok`). Shared by every caller: never set its truncation or padding."""
        return self._tok

    def encode(self, text: str) -> List[int]:
        """Token ids of `text` with no special tokens added."""
        return self.encode_many([text])[0]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens kept: what transformers' `decode` gives for the BPE
        tokenizers Laya ships (its space clean-up is skipped for BPE), so a token window decoded
        here re-tokenizes as it does in Laya's `predict_long`."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def encode_framed(self, texts: Sequence[str], max_length: int) -> List[List[int]]:
        """Each text's ids as transformers' `tok(texts, truncation=True, max_length=max_length)`
        gives them (Laya's embedder): framed by the special tokens the post-processor adds
        (`add_special_tokens=True`), the text's own tokens cut from the right so the row,
        specials included, holds at most `max_length`. A `max_length` below `frame_tokens`
        cuts nothing, as there: the `tokenizers` library's own truncation (which transformers
        sets) does the same, on any template (tokenizers 0.23.3, transformers 5.24; the
        embedding goldens hold `max_length` 1, 2 and 3).

        The cut is made here, before the frame, rather than by the tokenizer's own truncation,
        which is state on the shared tokenizer that every other call would then see."""
        keep = max_length - self.frame_tokens
        rows = []
        for encoding in self._encode_batch(texts):
            if 0 <= keep < len(encoding.ids):
                encoding.truncate(keep)
            rows.append(self._tok.post_process(encoding, None, True).ids)
        return rows

    def encode_many(self, texts: Sequence[str]) -> List[List[int]]:
        """`encode` over several texts in one call into the Rust side."""
        return [e.ids for e in self._encode_batch(texts)]

    def _encode_batch(self, texts: Sequence[str]) -> List[Any]:
        """The `tokenizers` encodings of `texts`, no special tokens added.

        Always at least two texts go in (an empty one pads a single text): the library then
        runs them on its own fixed pool of threads instead of the caller's. Every thread that
        tokenizes grows a private match cache of several MB, kept for the thread's life, so a
        server laying requests out on 32 threads otherwise gains over 100 MB of RSS under
        varied text; on the pool it is a few MB per core."""
        batch = list(texts)
        if len(batch) == 1:
            batch.append("")
        return self._tok.encode_batch(batch, add_special_tokens=False)[:len(texts)]
