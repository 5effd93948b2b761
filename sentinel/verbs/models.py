"""Verbs for the hazard model: ``sentinel train`` and ``sentinel model list|show``."""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from sentinel.errors import ConfigError
from sentinel.tables import fmt_value, parse_duration, render
from sentinel.verbs import EXIT_OK, load_config, out


def _models_dir(args: argparse.Namespace) -> Path:
    return Path(args.models_dir or load_config(args).detector.hazard.models_dir)


def _progress(args: argparse.Namespace, label: str) -> Any:
    def show(fraction: float) -> None:
        if sys.stderr.isatty():
            print(f"\r{label}: {fraction:4.0%}", end="", file=sys.stderr, flush=True)
    return show


def cmd_train(args: argparse.Namespace) -> int:
    from sentinel.models import hazard, persistence, training
    from sentinel.models.training import Dataset
    from sentinel.sim import trainset

    horizon_s = parse_duration(args.horizon)
    window = load_config(args).detector.window_samples
    parts: list[tuple[Dataset, str, str]] = []
    for data_dir in args.data or []:
        show = _progress(args, f"reading {data_dir}")
        data, digest = trainset.export_dataset(Path(data_dir), window, horizon_s, show)
        parts.append((data, digest, f"export {data_dir}"))
    for name in args.scenario or []:
        show = _progress(args, f"simulating {name}")
        data, digest = trainset.scenario_dataset(name, window, horizon_s, progress=show)
        parts.append((data, digest, f"scenario {name}"))
    if not parts:
        raise ConfigError("nothing to train on: give --data DIR (a `sentinel sim export`) or --scenario NAME")
    if sys.stderr.isatty():
        print(file=sys.stderr)
    data = training.combine([p[0] for p in parts])
    started = time.perf_counter()
    model = hazard.fit(data, horizon_s, args.target_precision)
    train_s = time.perf_counter() - started
    model.report["train_s"] = round(train_s, 2)
    model.report["window_samples"] = window
    name = args.name or time.strftime("hazard-%Y%m%d-%H%M%S")
    digest = parts[0][1] if len(parts) == 1 else _hash([p[1] for p in parts])
    config = load_config(args)
    key = None
    if config.security.key_file:  # the detector then loads only models this key signed
        from sentinel.actuator.signing import load_key

        key = load_key(config.security.key_file).secret
    directory = persistence.save(model, _models_dir(args), name, digest, "; ".join(p[2] for p in parts),
                                 sign_key=key)
    summary = {"model": name, "path": str(directory), "rows": model.report["rows"],
               "positive_rows": model.report["positive_rows"], "train_s": round(train_s, 2),
               "threshold": round(model.threshold, 4), "signed": key is not None, **model.report["validation"]}
    out(args, summary, render([{"key": k, "value": v} for k, v in summary.items()], [("key", "model"), ("value", "")])
        + f"\n\nUse it: set detector.hazard.model = \"{directory}\" (or \"latest\") in the config.")
    return EXIT_OK


def _hash(digests: list[str]) -> str:
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _verified(args: argparse.Namespace, directory: Path) -> str:
    """"ok" when the detector would load the model (hash, folder ownership, the service key's signature when
    security.key_file is set), else why not."""
    from sentinel.daemon import model_keys
    from sentinel.errors import ModelRefused
    from sentinel.models import persistence

    try:
        persistence.verify(directory, model_keys(load_config(args)))
    except ModelRefused as exc:
        return f"refused: {exc}"
    return "ok"


def cmd_model_list(args: argparse.Namespace) -> int:
    from sentinel.models import persistence

    rows = [{"name": m["name"], "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(m["created_ts"])),
             "horizon_s": m["horizon_s"], "threshold": round(m["threshold"], 4),
             "precision": m["training"].get("validation", {}).get("precision"),
             "recall": m["training"].get("validation", {}).get("recall"),
             "source": m["training"].get("source"), "path": m["path"], "verified": _verified(args, Path(m["path"]))}
            for m in persistence.list_models(_models_dir(args))]
    out(args, rows, render(rows, [("name", "name"), ("created", "created"), ("horizon_s", "horizon s"),
                                  ("threshold", "threshold"), ("precision", "val. precision"),
                                  ("recall", "val. recall"), ("source", "trained on"),
                                  ("verified", "verified")])
        if rows else f"no models in {_models_dir(args)}; train one with `sentinel train --data DIR`")
    return EXIT_OK


def cmd_model_show(args: argparse.Namespace) -> int:
    from sentinel.models import persistence

    directory = persistence.resolve(args.name, _models_dir(args))
    meta = persistence.metadata(directory)
    shown = {k: v for k, v in meta.items() if k not in ("healthy_median", "healthy_scale")}
    shown["verified"] = _verified(args, directory)
    lines = [f"{k}: {fmt_value(v)}" for k, v in shown.items() if k not in ("features", "training", "versions")]
    lines += ["training:"] + [f"  {k}: {_flat(v)}" for k, v in meta["training"].items()]
    lines += ["versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())]
    lines += ["features (column order): " + ", ".join(meta["features"])]
    out(args, shown, "\n".join(lines))
    return EXIT_OK


def _flat(value: object) -> str:
    """A nested training report as ``key value, key value`` rather than a Python dict's repr."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_flat(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_flat(v) for v in value)
    return fmt_value(value)
