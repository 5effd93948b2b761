"""Saving, loading and listing trained models: one directory per model with ``model.joblib`` (the fitted
estimators) and ``model.json`` (what an operator and the loader need: features in column order, horizon,
threshold, versions, the training data's hash and the validation numbers).

A joblib file is a pickle: loading one runs code from it. Load models only from a directory you control
(the loader refuses files that other users can write).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import platform
import stat
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import sklearn

from sentinel.clock import Clock, SystemClock
from sentinel.errors import ConfigError, ModelRefused
from sentinel_models import shipped
from sentinel_models.features import FEATURES
from sentinel_models.hazard import HazardModel

MODEL_FILE, META_FILE, SIGNATURE_FILE = "model.joblib", "model.json", "model.sig"


def save(model: HazardModel, root: Path, name: str, data_hash: str, source: str, clock: Clock | None = None,
         sign_key: bytes | None = None, recipe: dict[str, Any] | None = None, folder: str | None = None) -> Path:
    """Write the model under ``root/name`` and return that directory (refuses to overwrite); with ``sign_key``
    (the service's key), ``model.sig`` holds an HMAC of ``model.json``, which holds the model file's SHA-256."""
    directory = root / (folder or name)
    if directory.exists():
        raise ConfigError(f"model {name!r} already exists in {root}; choose another --name")
    directory.mkdir(parents=True)
    joblib.dump({"classifier": model.classifier, "anomaly": model.anomaly}, directory / MODEL_FILE)
    (directory / MODEL_FILE).chmod(0o644)
    meta = {
        "model_sha256": hash_files([directory / MODEL_FILE], names=False),  # checked before every load
        "name": name, "created_ts": (clock or SystemClock()).now(), "kind": "hazard", "features": list(model.features),
        "horizon_s": model.horizon_s, "threshold": model.threshold, "anomaly_threshold": model.anomaly_threshold,
        "healthy_median": model.healthy_median.tolist(), "healthy_scale": model.healthy_scale.tolist(),
        "training": {"data_hash": data_hash, "source": source, **model.report},
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "scikit_learn": sklearn.__version__},
    }
    if recipe is not None:
        meta["recipe"] = recipe
    (directory / META_FILE).write_text(json.dumps(meta, indent=2))
    if sign_key is not None:
        (directory / SIGNATURE_FILE).write_text(_signature(sign_key, (directory / META_FILE).read_bytes()) + "\n")
    return directory


def _signature(key: bytes, meta: bytes) -> str:
    return hmac.new(key, b"sentinel model\0" + meta, hashlib.sha256).hexdigest()


def _check_signature(directory: Path, keys: list[bytes]) -> None:
    """``model.json`` must carry an HMAC by one of ``keys`` (the service's key, then previous ones)."""
    try:
        found = (directory / SIGNATURE_FILE).read_text().strip()
        meta = (directory / META_FILE).read_bytes()
    except OSError:
        raise ModelRefused(f"{directory}: no {SIGNATURE_FILE}; with security.key_file set only models signed with "
                          "that key are loaded (`sentinel train` signs them)") from None
    if not any(hmac.compare_digest(found, _signature(key, meta)) for key in keys):
        raise ModelRefused(f"{directory}: {SIGNATURE_FILE} does not match {META_FILE} under the service's key; "
                          "the model was not trained here or was changed, so it is not loaded")


def metadata(directory: Path) -> dict[str, Any]:
    path = directory / META_FILE
    try:
        meta: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable model description ({exc})") from exc
    return meta


def verify(directory: Path, verify_keys: list[bytes] | None = None) -> None:
    """Every check ``load`` makes before unpickling: raises ConfigError naming what is wrong. The shipped model
    is verified by the SHA-256 pinned in ``models.shipped`` (no site key signs it); any other by ``verify_keys``
    when given."""
    _check_folder(directory)
    if shipped.is_shipped(directory):
        shipped.verify_pinned(directory)
    elif verify_keys:
        _check_signature(directory, verify_keys)
    meta = metadata(directory)
    if tuple(meta.get("features", ())) != FEATURES:
        raise ModelRefused(f"{directory}: model was trained on other features ({len(meta.get('features', []))} "
                          f"columns, this version computes {len(FEATURES)}); retrain it with `sentinel train`")
    path = directory / MODEL_FILE
    expected = meta.get("model_sha256")
    if not expected:
        raise ModelRefused(f"{directory}: the model description records no SHA-256 of {MODEL_FILE} (saved by an "
                          "older version); retrain it with `sentinel train`")
    if hash_files([path], names=False) != expected:
        raise ModelRefused(f"{path}: its SHA-256 does not match {META_FILE}; the file was changed after training, "
                          "so it is not loaded")


def load(directory: Path, verify_keys: list[bytes] | None = None) -> HazardModel:
    """The model saved in ``directory``; refuses one built for other features, writable by others, whose file
    does not match its recorded hash, or (with ``verify_keys``) whose description is not signed by one of them."""
    verify(directory, verify_keys)
    meta = metadata(directory)
    path = directory / MODEL_FILE
    estimators = joblib.load(path)
    return HazardModel(estimators["classifier"], float(meta["threshold"]), float(meta["horizon_s"]),
                       estimators["anomaly"], float(meta["anomaly_threshold"]), FEATURES, meta.get("training", {}),
                       np.asarray(meta["healthy_median"], np.float64), np.asarray(meta["healthy_scale"], np.float64))


def _check_folder(directory: Path) -> None:
    """Every file of a model folder is held to the pickle's rule, ``model.json`` included (it says which file is
    loaded and what its hash must be): no symlink in the folder (one to a trusted file passed the old check), each
    entry owned by root or this user and writable by nobody else; then the folder and every folder above it."""
    real = directory.resolve()
    model = real / MODEL_FILE
    try:
        entries = sorted(real.iterdir())
    except OSError as exc:
        raise ModelRefused(f"{directory}: cannot read the model folder ({exc.strerror})") from None
    for entry in entries:
        if entry.is_symlink():
            raise ModelRefused(f"{entry}: a symlink in a model folder; models are loaded only from plain files, "
                              "so this model is not loaded")
        _trusted(entry, model)
    for place in (real, *real.parents):
        _trusted(place, model)


def _trusted(place: Path, model: Path) -> None:
    """A model file runs code when loaded (a pickle): it and every folder above it must be owned by root or by
    this user and writable by nobody else (a sticky folder such as /tmp is fine above the models folder)."""
    try:
        info = place.stat()
    except OSError as exc:
        raise ModelRefused(f"{place}: cannot read the model ({exc})") from exc
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid not in (0, os.geteuid()):
        raise ModelRefused(f"{place}: owned by uid {info.st_uid}, not by this user or root; {model} is not loaded "
                          "(a model file runs code when loaded)")
    sticky_above = place.is_dir() and bool(mode & stat.S_ISVTX) and place not in (model.parent, model.parent.parent)
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_above:
        raise ModelRefused(f"{place}: writable by group or others (mode {mode:o}); a model file runs code when "
                          f"loaded, so Sentinel only loads {model} from folders only their owner can write")


def list_models(root: Path) -> list[dict[str, Any]]:
    """Every model under ``root``, newest first."""
    if not root.is_dir():
        return []
    found = [metadata(d) | {"path": str(d)} for d in root.iterdir() if (d / META_FILE).is_file()]
    return sorted(found, key=lambda m: m.get("created_ts", 0), reverse=True)


def resolve(spec: str, root: Path) -> Path:
    """``spec`` is ``shipped`` (the packaged model), a model directory, a model name under ``root``, or
    ``latest`` (the newest under ``root``)."""
    if spec == shipped.NAME:
        return shipped.DIRECTORY
    if spec == "latest":
        models = list_models(root)
        if not models:
            raise ConfigError(f"no model in {root}; train one with `sentinel train --data DIR`")
        return Path(models[0]["path"])
    path = Path(spec)
    if (path / META_FILE).is_file():
        return path
    if (root / spec / META_FILE).is_file():
        return root / spec
    raise ConfigError(f"model {spec!r} not found (neither a model directory nor a name in {root})")


def hash_files(paths: list[Path], names: bool = True) -> str:
    """SHA-256 over the files' names (unless ``names`` is False) and contents, in the order given."""
    digest = hashlib.sha256()
    for path in paths:
        if names:
            digest.update(os.fsencode(path.name))
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
