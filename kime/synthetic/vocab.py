"""The synthetic checkpoints' tokenizers: a BPE trained with the `tokenizers` library on the
built-in corpus (`kime._corpus`), byte-level with `[MASK]`-style specials as ModernBERT has, or
Metaspace with byte fallback and `<mask>`-style specials as mmBERT/Gemma have, written with the
transformers configs a loader reads beside it.

A tokenizer's post-processor (what `encode(..., add_special_tokens=True)` puts around a text, which
is what Laya's embedder runs the encoder on) is the shape's own by default, or one of
`TOKENIZER_TEMPLATES`'s others, so the embedding rows can be tested on templates other than
ModernBERT's without a download."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Dict

from .._corpus import corpus_lines
from .shapes import Shape

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_ENGLISH_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]

TOKENIZER_TEMPLATES = ("default", "bare", "bos-eos")
"""What a synthetic tokenizer's post-processor adds around one text: `default` the shape's own
(`[CLS] $A [SEP]` as ModernBERT's, or `<bos> $A <eos>` where `<bos>` and `<eos>` are the layout's
cls and sep, as mmBERT's), `bare` nothing (`$A`), `bos-eos` `<bos> $A <eos>` with two tokens of
their own, appended to the vocabulary after training, that the decision layout never uses
(byte-level shapes only: a metaspace shape's own template is that already)."""
_OWN_TEMPLATE_TOKENS = ("<bos>", "<eos>")


def special_ids(shape: Shape) -> Dict[str, int]:
    """Token ids of the specials; the trainer puts them first, in list order."""
    if shape.tokenizer == "byte-level":
        unk, cls, sep, pad, mask = range(5)
        return {"unk": unk, "cls": cls, "sep": sep, "pad": pad, "mask": mask, "bos": cls,
                "eos": sep}
    pad, eos, bos, unk, mask = range(5)
    return {"unk": unk, "cls": bos, "sep": eos, "pad": pad, "mask": mask, "bos": bos, "eos": eos}



def _train_tokenizer(shape: Shape) -> "Tokenizer":
    """Train the shape's BPE on the built-in corpus; deterministic for a `tokenizers` version."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers

    if shape.tokenizer == "byte-level":
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials = [AddedToken(t, special=True, normalized=False, lstrip=(t == "[MASK]"))
                    for t in _ENGLISH_SPECIALS]
        trainer = trainers.BpeTrainer(vocab_size=shape.tokenizer_vocab, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(corpus_lines(), trainer)
        ids = special_ids(shape)
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", ids["cls"]), ("[SEP]", ids["sep"])])
        return tok
    if shape.tokenizer != "metaspace":
        raise ValueError("unknown tokenizer kind %r" % (shape.tokenizer,))
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    specials = [AddedToken(t, special=True, normalized=False) for t in _GEMMA_SPECIALS]
    trainer = trainers.BpeTrainer(vocab_size=shape.tokenizer_vocab - 256, special_tokens=specials,
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    return _with_byte_tokens(tok, special_ids(shape))


def _with_byte_tokens(tok: "Tokenizer", ids: Dict[str, int]) -> "Tokenizer":
    """Insert the 256 `<0xNN>` byte tokens after the specials, as SentencePiece vocabularies have.

    The BPE trainer knows nothing of byte fallback, so without them every character outside the
    trained alphabet would be `<unk>`. They join the model vocabulary, not the added tokens, so a
    literal "<0x41>" in a text is not matched as one.
    """
    from tokenizers import Tokenizer, processors

    data = json.loads(tok.to_str())
    old_vocab = data["model"]["vocab"]
    ordered = sorted(old_vocab.items(), key=lambda kv: kv[1])
    n_special = len(_GEMMA_SPECIALS)
    names = [k for k, _ in ordered[:n_special]]
    names += ["<0x%02X>" % b for b in range(256)]
    names += [k for k, _ in ordered[n_special:]]
    data["model"]["vocab"] = {name: i for i, name in enumerate(names)}
    remap = {old_vocab[name]: i for i, name in enumerate(names) if name in old_vocab}
    for added in data["added_tokens"]:
        added["id"] = remap[added["id"]]
    rebuilt = Tokenizer.from_str(json.dumps(data))
    rebuilt.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=[("<bos>", ids["bos"]), ("<eos>", ids["eos"])])
    return rebuilt


def _added_token(content: str, lstrip: bool = False) -> Dict[str, object]:
    return {"content": content, "lstrip": lstrip, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}


def _set_template(tok: "Tokenizer", template: str) -> Dict[str, int]:
    """Replace the trained tokenizer's post-processor by `template`'s (not `default`); the ids of
    the tokens added for it."""
    from tokenizers import AddedToken, processors

    if template == "bare":
        tok.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B",
                                                           special_tokens=[])
        return {}
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in _OWN_TEMPLATE_TOKENS])
    ids: Dict[str, int] = {}
    for text in _OWN_TEMPLATE_TOKENS:
        token_id = tok.token_to_id(text)
        assert token_id is not None, text  # just added
        ids[text] = token_id
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=list(ids.items()))
    return ids


def write_tokenizer(shape: Shape, out: Path, template: str = "default") -> int:
    """Write tokenizer.json and its transformers configs; returns the tokenizer vocabulary size.

    The English shapes name their specials in both configs and write the mask as a
    `{"content": ...}` object, the way ModernBERT ships it; the multilingual shape names them in
    `special_tokens_map.json` only, so a loader must read both files to find the mask.
    `tokenizer_class` is set so Laya's `_fix_tokenizer_config` leaves the files untouched.
    `template` names the post-processor (`TOKENIZER_TEMPLATES`); `bos-eos` also names its two
    tokens as the bos and eos tokens in both configs.
    """
    if template not in TOKENIZER_TEMPLATES:
        raise ValueError("tokenizer template must be one of %s, got %r"
                         % (", ".join(TOKENIZER_TEMPLATES), template))
    if template == "bos-eos" and shape.tokenizer != "byte-level":
        raise ValueError("the bos-eos template is for byte-level shapes: a %s shape's own "
                         "template is <bos> $A <eos> already" % shape.tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(shape)
    added = _set_template(tok, template) if template != "default" else {}
    tok.save(str(out / "tokenizer.json"), pretty=True)
    base = {
        "clean_up_tokenization_spaces": False,
        "model_max_length": shape.model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if shape.tokenizer == "byte-level":
        mask = {k: v for k, v in _added_token("[MASK]", lstrip=True).items() if k != "special"}
        config = dict(base)
        # transformers reads an object-valued special token in tokenizer_config.json only with
        # the legacy "__type" tag (without it: TypeError); special_tokens_map.json takes it bare.
        decoder = {str(i): _added_token(t, lstrip=(t == "[MASK]"))
                   for i, t in enumerate(_ENGLISH_SPECIALS)}
        decoder.update({str(i): _added_token(t) for t, i in added.items()})
        config.update({
            "added_tokens_decoder": decoder,
            "cls_token": "[CLS]",
            "mask_token": dict({"__type": "AddedToken"}, **mask),
            "pad_token": "[PAD]",
            "sep_token": "[SEP]",
            "unk_token": "[UNK]",
        })
        special_map: Dict[str, object] = {
            "cls_token": "[CLS]", "mask_token": mask, "pad_token": "[PAD]",
            "sep_token": "[SEP]", "unk_token": "[UNK]",
        }
    else:
        config = dict(base)
        special_map = {
            "bos_token": "<bos>", "cls_token": "<bos>", "eos_token": "<eos>",
            "mask_token": "<mask>", "pad_token": "<pad>", "sep_token": "<eos>",
            "unk_token": "<unk>",
        }
    for role, text in zip(("bos_token", "eos_token"), added):
        config[role] = special_map[role] = text
    write_json(out / "tokenizer_config.json", dict(sorted(config.items())))
    write_json(out / "special_tokens_map.json", special_map)
    return tok.get_vocab_size()


def write_json(path: Path, payload: object) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, ensure_ascii=False)
        f.write("\n")

