"""Laya's calibration surface: the temperatures an agent answers with, as Laya 0.4.15's `Agent`
holds and changes them (`calibration=` at load, `load_calibration`, `save_calibration`,
`lang_temperatures` with per-call `lang=`, and the histogram `binning_map`).

The engine scales logits by a `kime.calibration.Temperatures` and knows nothing of files or
languages; this module keeps Laya's attributes and rules and hands the engine the right
`Temperatures` for each call. The clamp and bucket rules are the engine's (`kime.calibration`),
so a value means the same here as in a checkpoint.

Laya's order of precedence, kept exactly: a `lang` with an override uses that language's
temperatures and never the binning map; any other call uses the agent's temperatures (the
checkpoint's, or a calibration file's) and the binning map when one is installed.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..answers import Answer
from ..calibration import TEMP_MAX, TEMP_MIN, Temperatures, clamp_temperature, temp_bucket, \
    temperature_rejected
from ..engine import Kime
from ..errors import InvalidArgument, problem, warn_caller
from .confidence import answer_confidence
from .wire import AnswerConfidence

CALIBRATION_VERSION = 2
"""The payload schema `save_calibration` writes. A file without `version` is version 1 (no
checkpoint identity) and still loads."""

_IDENTITY_SKIP = ("temperature", "temperature_by_options")

BinningMap = Dict[str, Dict[str, Any]]
LangTemperatures = Dict[str, Dict[str, Any]]


def normalise_lang(lang: Any) -> Optional[str]:
    """The language key a per-call `lang` selects: the primary subtag, lower-cased (`"FR-ca"` ->
    `"fr"`), as Laya reads it; None for no language (None or empty, which Laya ignores).

    Laya fails on a non-string `lang` with a bare `AttributeError` from `.split` mid-decode; kime
    refuses it up front as a `TypeError` naming the argument."""
    if not lang:
        return None
    if not isinstance(lang, str):
        raise InvalidArgument([problem(["lang"], "lang must be a language code string such as "
                                       "'de' or 'fr-CA', got %s" % type(lang).__name__,
                                       "type_error.str", lang)])
    return lang.split("-")[0].lower()


def _rejected(entries: Sequence[Tuple[str, Any, float]]) -> List[str]:
    """`name=raw -> applied` for each value the clamp replaced (Laya's warning lists these)."""
    return ["%s=%r -> %g" % (name, raw, applied) for name, raw, applied in entries
            if temperature_rejected(raw, applied)]


def resolve_lang_temperatures(raw: Any, base_temperature: Sequence[Any]) -> LangTemperatures:
    """`lang_temperatures` as Laya resolves it: `{primary subtag: {temperature,
    temperature_by_options}}`, every value clamped.

    A `null` override or a `null` temperature inherits the checkpoint's own (`base_temperature`,
    its raw list, clamped here). A replaced value warns once per language, naming it; inherited
    values are not repeated, the checkpoint's load already named them. Shapes that cannot be read
    are refused with Laya's `ValueError`s."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("lang_temperatures must be a mapping of language -> {temperature, "
                         "temperature_by_options}, got %s" % type(raw).__name__)
    resolved: LangTemperatures = {}
    for lang, cfg in raw.items():
        if not isinstance(lang, str):
            raise ValueError("Language override keys must be strings, got %r" % (lang,))
        if cfg is None:
            cfg = {}
        if not isinstance(cfg, dict):
            raise ValueError("Language override %r must be a mapping, got %s"
                             % (lang, type(cfg).__name__))
        t_raw = cfg.get("temperature")
        inherited = t_raw is None
        if inherited:
            t_raw = base_temperature
        if not isinstance(t_raw, (list, tuple)) or len(t_raw) != 3:
            raise ValueError("Language override %r temperature must be a list of 3 floats, got %r"
                             % (lang, t_raw))
        by_raw = cfg.get("temperature_by_options") or {}
        if not isinstance(by_raw, dict):
            raise ValueError("Language override %r temperature_by_options must be a mapping of "
                             "bucket -> float, got %s" % (lang, type(by_raw).__name__))
        temperature = [clamp_temperature(t) for t in t_raw]
        by_options = {k: clamp_temperature(v) for k, v in by_raw.items()}
        entries = [] if inherited else [("temperature[%d]" % i, r, a)
                                        for i, (r, a) in enumerate(zip(t_raw, temperature))]
        entries += [("%s" % k, v, by_options[k]) for k, v in by_raw.items()]
        rejected = _rejected(entries)
        if rejected:
            warn_caller(
                "kime: language override %r ships invalid temperatures or values outside "
                "[%g, %g]; using %s. Treat confidence from the affected entries as uncalibrated."
                % (lang, TEMP_MIN, TEMP_MAX, ", ".join(rejected)), RuntimeWarning)
        resolved[lang.split("-")[0].lower()] = {"temperature": temperature,
                                                "temperature_by_options": by_options}
    return resolved


def apply_binning_map(confidence: float, bucket: str, binning_map: BinningMap) -> float:
    """One `answer_confidence` recalibrated through its bucket's histogram: the value of the bin
    it falls in. A bucket the map has no entry for passes through unchanged (Laya's rule)."""
    entry = binning_map.get(bucket)
    if not entry:
        return float(confidence)
    bins = int(entry["bins"])
    b = min(bins - 1, max(0, int(float(confidence) * bins)))
    return float(entry["values"][b])


def config_identity(cfg: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The checkpoint config a calibration records, without the temperatures it stores itself."""
    if cfg is None:
        return None
    return {str(k): cfg[k] for k in cfg if k not in _IDENTITY_SKIP}


def check_payload(payload: Any) -> Tuple[int, List[Any], Dict[Any, Any], Optional[BinningMap]]:
    """A calibration file's (version, temperature, temperature_by_options, binning_map), its
    shape refused with Laya's `ValueError` naming the field. Temperatures are clamped later
    (forgiven); binning values are not, because nothing could stand in for a bad one."""
    if not isinstance(payload, dict):
        raise ValueError("calibration JSON must be an object, got %s" % type(payload).__name__)
    version = payload.get("version", 1)
    if version is None:
        version = 1
    bad_version = ValueError("calibration JSON version must be an integer, got %r" % (version,))
    if isinstance(version, bool) or not isinstance(version, (int, float, str)):
        raise bad_version
    if isinstance(version, float) and not version.is_integer():
        raise bad_version  # 1.9 would truncate to 1 and skip the identity check
    try:
        version = int(version)
    except (TypeError, ValueError, OverflowError) as e:
        raise bad_version from e
    temps = payload.get("temperature")
    if not isinstance(temps, (list, tuple)) or len(temps) != 3:
        raise ValueError("calibration JSON must contain temperature: [3 floats]")
    by_options = payload.get("temperature_by_options")
    if by_options is None:
        by_options = {}
    if not isinstance(by_options, dict):
        raise ValueError("calibration JSON temperature_by_options must be an object of bucket -> "
                         "float, got %s" % type(by_options).__name__)
    binning = payload.get("binning_map")
    if binning is not None:
        _check_binning(binning)
    return version, list(temps), by_options, binning


def _check_binning(binning: Any) -> None:
    if not isinstance(binning, dict):
        raise ValueError("calibration JSON binning_map must be an object of bucket -> {bins, "
                         "values}, got %s" % type(binning).__name__)
    for name, entry in binning.items():
        where = "calibration JSON binning_map[%r]" % (name,)
        if not isinstance(entry, dict):
            raise ValueError("%s must be an object with \"bins\" and \"values\", got %s"
                             % (where, type(entry).__name__))
        n_bins, values = entry.get("bins"), entry.get("values")
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise ValueError("%s must have an integer \"bins\" >= 1, got %r" % (where, n_bins))
        if not isinstance(values, (list, tuple)) or len(values) != n_bins:
            raise ValueError("%s must have \"values\" of length \"bins\" (%d)" % (where, n_bins))
        try:
            parsed = [float(v) for v in values]
        except (TypeError, ValueError) as e:
            raise ValueError("%s values must be numbers, got %r" % (where, values)) from e
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
            raise ValueError("%s values must be numbers, got %r" % (where, values))
        for v in parsed:
            if not math.isfinite(v):
                raise ValueError("%s values must be finite, got %r" % (where, values))
            if not 0.0 <= v <= 1.0:
                raise ValueError("%s values must be in [0, 1], got %r" % (where, values))


class Calibration:
    """An agent's calibration state, with Laya's attribute names.

    `temperature` / `temperature_by_options` are the values inference applies (clamped);
    `temperature_raw` / `temperature_by_options_raw` what the checkpoint or file shipped;
    `lang_temperatures` the resolved per-language overrides; `binning_map` the histogram map
    or None. `model_id_or_path`, `subfolder` and `cfg` are the checkpoint identity that
    `save` records and `load` compares; they default to the engine's name, no subfolder and its
    config. `path` is a calibration file applied after the checkpoint's config, as Laya's
    `calibration=` is.
    """

    def __init__(self, engine: Kime, lang_temperatures: Any = None, path: Optional[str] = None,
                 *, model_id_or_path: Optional[str] = None, subfolder: Optional[str] = None):
        base = engine.temperatures
        self.model_id_or_path: Optional[str] = (engine.model_id if model_id_or_path is None
                                                else model_id_or_path)
        self.subfolder = subfolder
        self.cfg: Dict[str, Any] = engine.checkpoint.config.raw
        self.temperature_raw: List[Any] = list(base.raw)
        self.temperature_by_options_raw: Dict[Any, Any] = dict(base.raw_by_options)
        self.temperature: List[float] = list(base.by_type)
        self.temperature_by_options: Dict[Any, float] = dict(base.by_options)
        self.binning_map: Optional[BinningMap] = None
        self.lang_temperatures: LangTemperatures = resolve_lang_temperatures(
            lang_temperatures, self.temperature_raw)
        self._engine = engine
        if path:
            self.load(path)

    # --- per call ---------------------------------------------------------------------------

    def temperatures(self, lang: Any = None) -> Temperatures:
        """The temperatures a call with this `lang` answers with: the language's override when
        there is one, else the agent's (the checkpoint's unless a file or assignment changed
        them). Read from the attributes on every call, so assigning them takes effect."""
        override = self.lang_temperatures.get(normalise_lang(lang) or "")
        if override is not None:
            return Temperatures(override["temperature"], override["temperature_by_options"],
                                source="lang_temperatures")
        base = self._engine.temperatures
        if self.temperature == base.by_type and self.temperature_by_options == base.by_options:
            return base
        return Temperatures(self.temperature, self.temperature_by_options, source="calibration")

    def answer_conf(self, lang: Any = None) -> Optional[AnswerConfidence]:
        """How `answer_confidence` is computed for a call with this `lang`: through the binning
        map when one is installed and the language has no override (Laya skips the map for an
        overridden language), else None (max(p))."""
        binning = self.binning_map
        if not binning or normalise_lang(lang) in self.lang_temperatures:
            return None

        def binned(a: Answer) -> float:
            k = a.k
            return apply_binning_map(answer_confidence(a.probabilities, k),
                                     temp_bucket(a.question.type_index, k), binning)

        return binned

    # --- files ------------------------------------------------------------------------------

    def payload(self) -> Dict[str, Any]:
        """What `save` writes: Laya's version-2 payload (temperatures, the binning map when one
        is installed, and the checkpoint identity)."""
        out: Dict[str, Any] = {
            "version": CALIBRATION_VERSION,
            "temperature": [float(x) for x in self.temperature],
            "temperature_by_options": {str(k): float(v)
                                       for k, v in dict(self.temperature_by_options).items()},
            "model_id_or_path": self.model_id_or_path,
            "subfolder": self.subfolder,
            "config": config_identity(self.cfg),
        }
        if self.binning_map is not None:
            out["binning_map"] = self.binning_map
        return out

    def save(self, path: str) -> None:
        """Write the payload to `path` atomically: a temporary file in the same directory,
        flushed to disk, then renamed over `path` (keeping an existing file's mode), so a reader
        never sees half a file and a failed write leaves the old one."""
        payload = self.payload()
        destination = os.path.realpath(path)
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(destination), prefix=".calibration.",
                                         suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(payload, f, indent=2)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                mode = os.stat(destination).st_mode & 0o777
            except FileNotFoundError:
                pass
            else:
                os.chmod(temporary, mode)
            os.replace(temporary, destination)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise

    def load(self, path: str) -> None:
        """Install a file written by `save` (or by Laya): its temperatures, and its binning map or
        None when it has none -- the file is the whole calibration state, not a patch. A
        version-2 file recorded for another checkpoint warns and still loads; out-of-range
        temperatures are clamped with a warning; a malformed file changes nothing."""
        with open(path, encoding="utf-8") as f:
            payload = json.load(f)
        self.apply(payload)

    def apply(self, payload: Any) -> None:
        """`load` for a payload already parsed."""
        version, temps, by_options, binning = check_payload(payload)
        self.binning_map = binning
        if version >= CALIBRATION_VERSION:
            self._warn_if_other_checkpoint(payload)
        self._install(temps, by_options)

    def _warn_if_other_checkpoint(self, payload: Dict[str, Any]) -> None:
        recorded = (payload.get("model_id_or_path"), payload.get("subfolder"),
                    payload.get("config"))
        current_cfg = config_identity(self.cfg)
        if recorded == (self.model_id_or_path, self.subfolder, current_cfg):
            return
        note = " Checkpoint config identity differs." if recorded[2] != current_cfg else ""
        warn_caller(
            "calibration was fitted for model_id_or_path=%r subfolder=%r but this agent is "
            "model_id_or_path=%r subfolder=%r.%s Loading the temperatures anyway."
            % (recorded[0], recorded[1], self.model_id_or_path, self.subfolder, note),
            UserWarning)

    def _install(self, temperature: List[Any], by_options: Dict[Any, Any]) -> None:
        applied = [clamp_temperature(t) for t in temperature]
        raw_b = {str(k): v for k, v in by_options.items()}
        applied_b = {k: clamp_temperature(v) for k, v in raw_b.items()}
        self.temperature_raw, self.temperature = list(temperature), applied
        self.temperature_by_options_raw, self.temperature_by_options = raw_b, applied_b
        entries = [("temperature[%d]" % i, r, applied[i]) for i, r in enumerate(temperature)]
        entries += [(k, raw_b[k], applied_b[k]) for k in raw_b]
        rejected = _rejected(entries)
        if rejected:
            warn_caller(
                "kime: calibration temperatures are invalid or outside [%g, %g]; using %s. Treat "
                "confidence from the affected entries as uncalibrated."
                % (TEMP_MIN, TEMP_MAX, ", ".join(rejected)), RuntimeWarning)
