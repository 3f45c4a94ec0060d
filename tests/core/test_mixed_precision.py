"""`precision="mixed"`: each layer's GEMMs in the precision its layer choice names (INT8, BF16 or
FP32), loaded from the choice `kime gate --mixed` writes. A choice naming one precision for every
layer gives that precision's bits exactly; a real mix is deterministic (the same bits alone, in a
batch, at any thread count) and is neither uniform precision; its packed weights are cached under
a key of their own; and a missing, stale or malformed choice is refused by name."""
from __future__ import annotations

import json
import shutil
import tracemalloc
import warnings
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

import kime
from kime._cpu import _bgemm
from kime.batch import Batch
from kime.buckets import pick_bucket
from kime.layer_choice import (FILE_NAME, LayerChoice, checkpoint_digest, find_choice, in_cache,
                               read_choice, write_choice)

from .test_cpu_backend import QUESTIONS, STATE, _engine, _requests
from ..paths import TINY

BF16 = _bgemm.missing() is None
# The layer that is not INT8 in the mixes below: BF16 where it runs, else FP32.
OTHER = "bf16" if BF16 else "f32"


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the golden tiny checkpoint (4 encoder layers, 2 head layers) with its own
    cache, so choices and packs never touch the committed files or the user's cache."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    return Path(shutil.copytree(TINY, tmp_path / "tiny"))


def choose(path: Path, encoder: Sequence[str], head: Sequence[str]) -> str:
    return write_choice(str(path), LayerChoice(tuple(encoder), tuple(head),
                                               checkpoint_digest(str(path))))


def logits(engine: kime.Kime, reqs: List[Dict[str, object]]) -> List[bytes]:
    out = []
    for resp in engine.decide_batch(reqs, cache=False):
        out += [a.logits.tobytes() + a.act.tobytes() for a in resp.answers.values()]
    return out


@pytest.mark.parametrize("precision", ["f32", "int8"] + (["bf16"] if BF16 else []))
def test_one_precision_everywhere_gives_its_bits(tiny: Path, precision: str) -> None:
    reqs = _requests(5, 10)
    assert choose(tiny, [precision] * 4, [precision] * 2) == str(tiny / FILE_NAME)
    mixed = _engine(tiny, threads=2, precision="mixed")
    assert "mixed: 6 " in mixed.device and precision.upper() in mixed.device
    assert logits(mixed, reqs) == logits(_engine(tiny, threads=2, precision=precision), reqs)


def test_a_mix_is_deterministic_and_really_mixed(tiny: Path) -> None:
    reqs = _requests(13, 16)
    choose(tiny, ["int8", OTHER, "f32", "int8"], [OTHER, "int8"])
    two = _engine(tiny, threads=2, precision="mixed")
    one = _engine(tiny, threads=1, precision="mixed")
    assert "mixed: 3 " in two.device
    together = logits(two, reqs[::-1])
    alone = [b for req in reqs[::-1] for b in logits(one, [req])]
    assert together == alone
    for uniform in ("f32", "int8"):
        theirs = logits(_engine(tiny, threads=2, precision=uniform), reqs[::-1])
        assert all(a != b for a, b in zip(together, theirs)), uniform


def test_mixed_weights_are_cached_under_their_mix(tiny: Path) -> None:
    choose(tiny, ["int8", "f32", "f32", "int8"], ["f32", "int8"])
    first = _engine(tiny, threads=1, precision="mixed")
    assert first.backend.weights_from == "packed" and "-mixed." in first.backend.weights_file
    again = _engine(tiny, threads=1, precision="mixed")
    assert again.backend.weights_from == "cache"
    assert again.backend.weights_file == first.backend.weights_file
    choose(tiny, ["f32", "int8", "f32", "int8"], ["f32", "int8"])  # another mix, another file
    other = _engine(tiny, threads=1, precision="mixed")
    assert other.backend.weights_from == "packed"
    assert other.backend.weights_file != first.backend.weights_file
    assert other.memory().weights < _engine(tiny, threads=1, precision="f32").memory().weights


def test_warm_mixed_plan_allocates_nothing(tiny: Path) -> None:
    choose(tiny, ["int8", OTHER, "f32", "int8"], [OTHER, "int8"])
    eng = _engine(tiny, threads=2, precision="mixed")
    rows = eng.rows_for({"state": STATE * 4, "questions": QUESTIONS})
    batch = Batch.pack([r.ids for r in rows], [r.markers for r in rows], [0, 1, 2])
    eng.backend.prepare(batch.tokens)
    plan = eng.backend.plans[pick_bucket(batch.tokens)]
    plan.run(batch)
    tracemalloc.start()
    try:
        plan.run(batch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16384, peak


def test_laya_load_takes_mixed_and_a_copy_keeps_its_choice(tiny: Path, tmp_path: Path) -> None:
    choose(tiny, ["int8"] * 4, ["f32", "f32"])
    copy = Path(shutil.copytree(tiny, tmp_path / "copy"))  # new mtimes, same weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        agent = kime.load(str(copy), device="cpu", precision="mixed", threads=1)
    assert "mixed: 4 " in agent.engine.device
    assert agent.predict(STATE, QUESTIONS)["answers"].keys() == QUESTIONS.keys()


def test_a_missing_stale_or_malformed_choice_is_refused(tiny: Path) -> None:
    with pytest.raises(kime.BadOption, match="kime gate --mixed"):
        _engine(tiny, threads=1, precision="mixed")
    file = Path(choose(tiny, ["int8"] * 4, ["int8"] * 2))
    data = json.loads(file.read_text())
    file.write_text(json.dumps(dict(data, checkpoint_digest="0" * 32)))
    with pytest.raises(kime.BadOption, match="chosen for other weights"):
        _engine(tiny, threads=1, precision="mixed")
    file.write_text(json.dumps(dict(data, encoder=["int8", "fp4"], head="int8", version=7)))
    with pytest.raises(kime.BadOption) as err:
        _engine(tiny, threads=1, precision="mixed")
    for part in ("version 7", "'encoder' must list", "'head' must list"):  # every problem
        assert part in str(err.value)
    file.write_text("{not json")
    with pytest.raises(kime.BadOption, match="is not JSON"):
        _engine(tiny, threads=1, precision="mixed")
    file.write_text(json.dumps(dict(data, encoder=["int8"] * 3)))
    with pytest.raises(kime.BadOption, match="names 3 encoder and 2 head layers"):
        read_choice(str(tiny), 4, 2)


def test_mixed_runs_on_the_compiled_cpu_backend_only(tiny: Path) -> None:
    choose(tiny, ["int8"] * 4, ["int8"] * 2)
    with pytest.raises(kime.Unsupported, match="mixed"):
        _engine(tiny, backend="reference", precision="mixed")
    with pytest.raises(kime.Unsupported, match="CPU only"):
        kime.backend.Precision.parse("mixed").on(kime.backend.Device("cuda", 0))
    assert kime.factory.resolve_auto(kime.backend.Precision.MIXED).kind == "cpu"


def test_a_hub_snapshot_gets_its_choice_in_the_cache(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Hugging Face's cache shares its files between snapshots: the choice goes to kime's cache
    under the weights' digest, and a load finds it there."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    snap = tmp_path / "hub" / "models--org--laya" / "snapshots" / "abc123"
    shutil.copytree(TINY, snap)
    written = choose(snap, ["int8"] * 4, ["bf16" if BF16 else "f32"] * 2)
    digest = checkpoint_digest(str(snap))
    assert written == in_cache(digest) and not (snap / FILE_NAME).exists()
    assert find_choice(str(snap)) == written
    assert read_choice(str(snap), 4, 2).head == (("bf16" if BF16 else "f32"),) * 2
    assert "mixed: 4 " in _engine(snap, threads=1, precision="mixed").device
