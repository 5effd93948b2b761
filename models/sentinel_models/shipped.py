"""The hazard model the wheel ships (``detector.hazard.model = "shipped"``, the default).

It is trained by one reproducible recipe (``make model``, i.e. ``sentinel train --recipe shipped``:
``sentinel.sim.trainset.train_shipped``) on fleets drawn from the ``train`` scenario, and its two files live in
``sentinel_models/shipped/hazard/``. Their SHA-256 are pinned below, in the package's code, so the shipped model loads
verified with no site key: a packaged file that does not match its pin is refused (and the detector runs on the
rules, loudly). A site key (``security.key_file``) still signs and verifies the models a site trains itself.
"""

from __future__ import annotations

from pathlib import Path

from sentinel.errors import ModelRefused

NAME = "shipped"
DIRECTORY = Path(__file__).resolve().parent / "shipped" / "hazard"
# Written by `make model` (sentinel.sim.trainset.pin_shipped); a test checks them against the files.
PINNED_SHA256 = {
    "model.joblib": "f7bedd299d6b2f397c10d03ebd49b5bfdc45f4e6bf06d51453c246504eac9bfc",
    "model.json": "60b1dfe064a01da915fa22a4d32b3680fc9d332811660bb347d89036f921bc76",
}


def is_shipped(directory: Path) -> bool:
    """``directory`` is the packaged model's (the same folder, however it was named)."""
    try:
        return directory.resolve() == DIRECTORY
    except OSError:
        return False


def verify_pinned(directory: Path) -> None:
    """Each packaged file must have the SHA-256 pinned in this module."""
    import hashlib

    for name, expected in PINNED_SHA256.items():
        path = directory / name
        try:
            found = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise ModelRefused(f"{path}: the shipped model's file cannot be read ({exc})") from exc
        if found != expected:
            raise ModelRefused(f"{path}: its SHA-256 {found[:16]}... is not the one this version of Sentinel pins "
                               f"({expected[:16] or 'none'}...): the packaged model was changed, so it is not loaded")
