"""`Agent.tok`: the checkpoint's tokenizer as Laya exposes it, a transformers fast tokenizer, here
over the `tokenizers` library that kime lays rows out with (`kime.tokenizer.Tokenizer`).

Packages call it for exact token counts (`len(agent.tok(text)["input_ids"])`), for the special
tokens (`agent.tok.mask_token`) and to lay rows out themselves (`laya.common.build_sequence`
takes it). It gives transformers' ids, attention masks, truncation, padding, special tokens,
decoding and token conversions, checked against transformers' `AutoTokenizer` on the goldens'
tokenizers (`tests/goldens/ecosystem.json`). What it does not implement (text pairs, offsets,
torch or TensorFlow tensors) is refused by name, never ignored: an ignored `return_offsets_mapping`
would hand back an answer without what was asked.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from ..errors import InvalidArgument, problem
from ..tokenizer import SPECIAL_ROLES, Tokenizer

TextInput = Union[str, Sequence[str]]

_ACCEPTED = frozenset(("verbose", "return_token_type_ids", "return_length",
                       "return_special_tokens_mask", "split_special_tokens"))
"""transformers keywords that are read here; any other is refused (see the module's doc)."""


class Encoding(dict):
    """transformers' `BatchEncoding` as far as callers read it: a dict of `input_ids`,
    `attention_mask` (and what was asked for), also readable as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _refuse(loc: str, msg: str, value: Any) -> InvalidArgument:
    return InvalidArgument([problem(["tok", loc], msg, "value_error.unsupported", value)])


class LayaTokenizer:
    """The tokenizer of one checkpoint, shaped like transformers' fast tokenizer: call it on a
    text or a list of texts, `encode`, `decode`, `tokenize`, convert between tokens and ids,
    and read its special tokens (`mask_token`, `cls_token_id`, ...)."""

    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "right"
    truncation_side = "right"

    def __init__(self, tokenizer: Tokenizer, name_or_path: str = ""):
        self.tokenizer = tokenizer
        self.name_or_path = name_or_path
        self.model_max_length = tokenizer.model_max_length
        self._library = tokenizer.library
        self._texts = tokenizer.special_texts

    # --- special tokens -----------------------------------------------------------------------

    def _text(self, role: str) -> Optional[str]:
        return self._texts.get(role)

    def _id(self, role: str) -> Optional[int]:
        text = self._texts.get(role)
        return None if text is None else self._library.token_to_id(text)

    bos_token = property(lambda self: self._text("bos_token"))
    eos_token = property(lambda self: self._text("eos_token"))
    unk_token = property(lambda self: self._text("unk_token"))
    sep_token = property(lambda self: self._text("sep_token"))
    pad_token = property(lambda self: self._text("pad_token"))
    cls_token = property(lambda self: self._text("cls_token"))
    mask_token = property(lambda self: self._text("mask_token"))
    bos_token_id = property(lambda self: self._id("bos_token"))
    eos_token_id = property(lambda self: self._id("eos_token"))
    unk_token_id = property(lambda self: self._id("unk_token"))
    sep_token_id = property(lambda self: self._id("sep_token"))
    pad_token_id = property(lambda self: self._id("pad_token"))
    cls_token_id = property(lambda self: self._id("cls_token"))
    mask_token_id = property(lambda self: self._id("mask_token"))

    @property
    def all_special_tokens(self) -> List[str]:
        """The special tokens the config names, once each, in transformers' order."""
        seen: List[str] = []
        for role in SPECIAL_ROLES:
            text = self._texts.get(role)
            if text is not None and text not in seen:
                seen.append(text)
        return seen

    @property
    def all_special_ids(self) -> List[int]:
        return [self._library.token_to_id(t) for t in self.all_special_tokens]

    # --- the vocabulary -----------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._library.get_vocab_size(with_added_tokens=True))

    @property
    def vocab_size(self) -> int:
        return int(self._library.get_vocab_size(with_added_tokens=True))

    def get_vocab(self) -> Dict[str, int]:
        return dict(self._library.get_vocab(with_added_tokens=True))

    def convert_tokens_to_ids(self, tokens: Union[str, Sequence[str]]) -> Any:
        """A token's id (the unknown token's for one outside the vocabulary, as transformers
        gives), or a list of them."""
        if isinstance(tokens, str):
            found = self._library.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]],
                              skip_special_tokens: bool = False) -> Any:
        if isinstance(ids, int):
            return self._library.id_to_token(ids)
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._library.id_to_token(int(i)) for i in ids if int(i) not in special]

    # --- encoding -----------------------------------------------------------------------------

    def _rows(self, texts: List[str], add_special_tokens: bool, limit: Optional[int]
              ) -> List[List[int]]:
        if add_special_tokens:
            return self.tokenizer.encode_framed(texts, limit if limit is not None else 2 ** 62)
        rows = self.tokenizer.encode_many(texts)
        return rows if limit is None else [row[:limit] for row in rows]

    def __call__(self, text: TextInput, text_pair: Any = None, add_special_tokens: bool = True,
                 padding: Union[bool, str] = False, truncation: Union[bool, str, None] = None,
                 max_length: Optional[int] = None, return_tensors: Optional[str] = None,
                 return_attention_mask: Optional[bool] = None, **kwargs: Any) -> Encoding:
        """`input_ids` and `attention_mask` of a text (lists) or of a list of texts (a list
        each), as transformers' call gives them: special tokens framed by the tokenizer's
        post-processor, `truncation` cutting the text so the row holds `max_length` (the
        config's `model_max_length` when None), `padding` (`True`/`"longest"`, `"max_length"`)
        on the right with the pad token, `return_tensors="np"` for NumPy arrays."""
        unsupported = sorted(set(kwargs) - _ACCEPTED)
        if text_pair is not None:
            unsupported.insert(0, "text_pair")
        if unsupported:
            raise _refuse(unsupported[0], "kime's Agent.tok does not implement %s; it gives "
                          "input_ids and attention_mask" % ", ".join(unsupported), unsupported)
        single = isinstance(text, str)
        texts: List[Any] = [text] if single else list(text)
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise InvalidArgument([problem(["text", i], "a text must be a string, got %s"
                                           % type(texts[i]).__name__, "type_error.str", texts[i])
                                   for i in bad])
        limit = self._limit(truncation, max_length)
        rows = self._rows(texts, add_special_tokens, limit)
        masks = [[1] * len(row) for row in rows]
        width = self._width(padding, max_length, rows)
        if width is not None:
            pad = self.pad_token_id or 0
            rows = [row + [pad] * (width - len(row)) for row in rows]
            masks = [m + [0] * (width - len(m)) for m in masks]
        out = Encoding(input_ids=rows[0] if single else rows)
        if return_attention_mask is not False:
            out["attention_mask"] = masks[0] if single else masks
        if kwargs.get("return_token_type_ids"):
            out["token_type_ids"] = [[0] * len(r) for r in rows][0] if single else [
                [0] * len(r) for r in rows]
        if return_tensors is not None:
            return self._tensors(out, return_tensors, single)
        return out

    def _limit(self, truncation: Union[bool, str, None], max_length: Optional[int]
               ) -> Optional[int]:
        if truncation is None:  # transformers cuts at a max_length given alone
            return max_length
        if truncation in (False, "do_not_truncate"):
            return None
        if truncation not in (True, "longest_first", "only_first"):
            raise _refuse("truncation", "truncation must be True, 'longest_first', 'only_first' "
                          "or False, got %r" % (truncation,), truncation)
        return self.model_max_length if max_length is None else max_length

    def _width(self, padding: Union[bool, str], max_length: Optional[int],
               rows: List[List[int]]) -> Optional[int]:
        if padding in (False, "do_not_pad"):
            return None
        if padding in (True, "longest"):
            return max((len(r) for r in rows), default=0)
        if padding == "max_length":
            return max([max_length or self.model_max_length] + [len(r) for r in rows])
        raise _refuse("padding", "padding must be True, 'longest', 'max_length' or False, got "
                      "%r" % (padding,), padding)

    @staticmethod
    def _tensors(out: Encoding, kind: str, single: bool) -> Encoding:
        if kind != "np":
            raise _refuse("return_tensors", "return_tensors=%r needs that framework; kime has no "
                          "PyTorch: use 'np' (NumPy) or none (lists)" % (kind,), kind)
        import numpy as np

        arrays = Encoding()
        for key, value in out.items():
            rows = [value] if single else value
            if len({len(r) for r in rows}) > 1:
                raise _refuse("return_tensors", "rows of different lengths make no array: pass "
                              "padding=True", kind)
            arrays[key] = np.asarray(rows, dtype=np.int64)
        return arrays

    def encode(self, text: str, add_special_tokens: bool = True,
               truncation: Union[bool, str, None] = None, max_length: Optional[int] = None,
               **kwargs: Any) -> List[int]:
        """The ids of one text (`self(text)["input_ids"]`)."""
        return list(self(text, add_special_tokens=add_special_tokens, truncation=truncation,
                         max_length=max_length, **kwargs)["input_ids"])

    def tokenize(self, text: str, add_special_tokens: bool = False) -> List[str]:
        """The token strings of a text."""
        return list(self.convert_ids_to_tokens(self.encode(text, add_special_tokens)))

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        """The text of ids (an int, a list, or a NumPy row), special tokens kept unless
        skipped, as transformers decodes."""
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return str(self._library.decode([int(i) for i in token_ids],
                                        skip_special_tokens=skip_special_tokens))

    def batch_decode(self, sequences: Sequence[Any], skip_special_tokens: bool = False,
                     **kwargs: Any) -> List[str]:
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __repr__(self) -> str:
        return "LayaTokenizer(name_or_path=%r, vocab_size=%d)" % (self.name_or_path, len(self))


__all__ = ["Encoding", "LayaTokenizer"]
