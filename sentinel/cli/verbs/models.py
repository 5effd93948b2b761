"""Verbs for the hazard model: ``sentinel train`` and ``sentinel model list|show``."""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from sentinel.cli.verbs import EXIT_OK, load_config, out
from sentinel.errors import ConfigError
from sentinel.tables import fmt_value, parse_duration, render


def _models_dir(args: argparse.Namespace) -> Path:
    return Path(getattr(args, "models_dir", None) or load_config(args).detector.hazard.models_dir)


def _progress(args: argparse.Namespace, label: str) -> Any:
    """Progress on stderr: a live percentage on a terminal, a line every 10 % otherwise (logs, CI)."""
    shown = [-1]

    def show(fraction: float) -> None:
        if sys.stderr.isatty():
            print(f"\r{label}: {fraction:4.0%}", end="", file=sys.stderr, flush=True)
        elif int(fraction * 10) > shown[0]:
            shown[0] = int(fraction * 10)
            print(f"{label}: {shown[0] * 10}%", file=sys.stderr, flush=True)
    return show


def _train_recipe(args: argparse.Namespace) -> int:
    """``--recipe shipped``: the shipped model's recipe, saved as a site model, or with ``--ship`` as the
    packaged model itself (its pins rewritten)."""
    from sentinel.sim import trainset
    from sentinel_models import persistence, shipped

    show = _progress(args, "simulating the recipe's fleets")
    if args.ship:
        directory = trainset.train_shipped(shipped.DIRECTORY.parent, show)
        pins = trainset.pin_shipped(directory, Path(shipped.__file__))
        meta = persistence.metadata(directory)
        summary = {"model": shipped.NAME, "path": str(directory), **pins,
                   "threshold": round(meta["threshold"], 4), **meta["training"]["validation"]}
        out(args, summary, render([{"key": k, "value": v} for k, v in summary.items()], [("key", "model"),
                                                                                          ("value", "")]))
        return EXIT_OK
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        built = trainset.train_shipped(Path(tmp), show)
        model = persistence.load(built)
        meta = persistence.metadata(built)
    same = meta["model_sha256"] == persistence.metadata(shipped.DIRECTORY).get("model_sha256")
    return _save(args, model, meta["training"]["data_hash"], meta["training"]["source"], meta["recipe"],
                 extra={"same_as_shipped": same})


def cmd_train(args: argparse.Namespace) -> int:
    from sentinel.sim import trainset
    from sentinel_models import hazard, training
    from sentinel_models.training import Dataset

    if args.recipe:
        return _train_recipe(args)
    if args.ship:
        raise ConfigError("--ship needs --recipe shipped")
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
    digest = parts[0][1] if len(parts) == 1 else _hash([p[1] for p in parts])
    return _save(args, model, digest, "; ".join(p[2] for p in parts), None)


def _save(args: argparse.Namespace, model: Any, digest: str, source: str, recipe: dict[str, Any] | None,
          extra: dict[str, Any] | None = None) -> int:
    from sentinel_models import persistence

    name = args.name or time.strftime("hazard-%Y%m%d-%H%M%S")
    config = load_config(args)
    key = None
    if config.security.key_file:  # the detector then loads only models this key signed
        from sentinel.actuator.signing import load_key

        key = load_key(config.security.key_file).secret
    directory = persistence.save(model, _models_dir(args), name, digest, source, sign_key=key, recipe=recipe)
    summary = {"model": name, "path": str(directory), "rows": model.report["rows"],
               "positive_rows": model.report["positive_rows"], "train_s": model.report.get("train_s"),
               "threshold": round(model.threshold, 4), "signed": key is not None, **model.report["validation"],
               **(extra or {})}
    notes = [f"Use it: set detector.hazard.model = \"{directory}\" (or \"latest\") in the config; the default "
             "is the shipped model (`sentinel model show shipped`)."]
    if key is None:
        notes.append("Not signed: no security.key_file in this config. A detector whose config sets one refuses "
                     "unsigned models; train with that config (--config FILE) to sign it.")
    notes.append("Precision and recall are row-level on held-out nodes (many rows precede faults that give no "
                 "warning, so row recall stays low); `sentinel-bench detect` scores faults caught and lead time.")
    out(args, summary, render([{"key": k, "value": v} for k, v in summary.items()], [("key", "model"), ("value", "")])
        + "\n\n" + "\n".join(notes))
    return EXIT_OK


def _hash(digests: list[str]) -> str:
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _verified(args: argparse.Namespace, directory: Path) -> str:
    """"ok" when the detector would load the model (hash, folder ownership, the service key's signature when
    security.key_file is set), else why not."""
    from sentinel.daemon import model_keys
    from sentinel.errors import ModelRefused
    from sentinel_models import persistence

    try:
        persistence.verify(directory, model_keys(load_config(args)))
    except ModelRefused as exc:
        return f"refused: {exc}"
    return "ok"


def model_in_use(args: argparse.Namespace) -> dict[str, Any]:
    """The hazard model the detector would load with this config: its name, path and whether it verifies, or
    ``rules only`` when none is configured (``status``, ``check`` and ``model list`` show it)."""
    from sentinel_models import persistence

    spec = load_config(args).detector.hazard.model
    if not spec:
        return {"model": "rules only", "spec": "", "path": None, "verified": None}
    try:
        directory = persistence.resolve(spec, _models_dir(args))
    except ConfigError as exc:
        return {"model": "rules only", "spec": spec, "path": None, "verified": f"refused: {exc}"}
    verified = _verified(args, directory)
    name = persistence.metadata(directory).get("name", directory.name) if verified == "ok" else directory.name
    return {"model": name if verified == "ok" else "rules only", "spec": spec, "path": str(directory),
            "verified": verified}


def cmd_model_list(args: argparse.Namespace) -> int:
    from sentinel_models import persistence, shipped

    in_use = model_in_use(args)
    found = persistence.list_models(_models_dir(args))
    if shipped.DIRECTORY.is_dir():
        found.insert(0, persistence.metadata(shipped.DIRECTORY) | {"path": str(shipped.DIRECTORY)})
    rows = [{"name": m["name"], "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(m["created_ts"])),
             "horizon_s": m["horizon_s"], "threshold": round(m["threshold"], 4),
             "precision": m["training"].get("validation", {}).get("precision"),
             "recall": m["training"].get("validation", {}).get("recall"),
             "source": m["training"].get("source"), "path": m["path"], "verified": _verified(args, Path(m["path"])),
             "in_use": in_use["path"] is not None and in_use["model"] != "rules only"
             and Path(m["path"]).resolve() == Path(in_use["path"]).resolve()}
            for m in found]
    table = render(rows, [("name", "name"), ("in_use", "in use"), ("created", "created"),
                          ("horizon_s", "horizon s"), ("threshold", "threshold"), ("precision", "val. precision"),
                          ("recall", "val. recall"), ("source", "trained on"), ("verified", "verified")]) \
        if rows else f"no models in {_models_dir(args)}; train one with `sentinel train --data DIR`"
    out(args, rows, f"{table}\n\nin use: {in_use['model']}" + (f" ({in_use['verified']})"
                                                              if in_use["verified"] not in (None, "ok") else ""))
    return EXIT_OK


def cmd_model_show(args: argparse.Namespace) -> int:
    from sentinel_models import persistence

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
