"""Configuration is typed, defaulted to the safe embedded setup, validated once, and its errors name the path."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import config
from sentinel.config import Config
from sentinel.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sentinel.toml"
    path.write_text(text, encoding="utf-8")
    return path


def config_error(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        config.from_mapping(raw)
    return str(info.value)


# ----- defaults ----------------------------------------------------------------------------------------------


def test_defaults_are_the_safe_embedded_setup() -> None:
    cfg = config.load(None, environ={})
    assert cfg.policy.mode == "observe"
    assert cfg.actuator.kind == "dryrun"
    assert cfg.transport.kind == "memory"
    assert cfg.store.url.startswith("sqlite:///")
    assert cfg.metrics.listen == ""


def test_an_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    assert config.load(write(tmp_path, ""), environ={}) == Config()


def test_a_file_sets_only_the_values_it_names(tmp_path: Path) -> None:
    path = write(tmp_path, '[policy]\nmode = "act"\n[policy.breaker]\nmax_fraction = 0.25\n')
    cfg = config.load(path, environ={})
    assert cfg.policy.mode == "act"
    assert cfg.policy.breaker.max_fraction == 0.25
    assert cfg.policy.breaker.window_s == Config().policy.breaker.window_s
    assert cfg.actuator.kind == "dryrun"


def test_the_normalised_config_converts_back_to_the_same_config() -> None:
    cfg = config.from_mapping(
        {
            "policy": {"cooldown_s": 30, "breaker": {"max_fraction": 0.5}},
            "agent": {"node": "gpu-01", "collectors": ["host", "nvml"]},
        }
    )
    assert config.from_mapping(config.to_toml_dict(cfg)) == cfg


# ----- rejected keys and values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"nope": 1}, "nope"),
        ({"policy": {"nope": 1}}, "policy.nope"),
        ({"policy": {"breaker": {"max_fration": 0.2}}}, "policy.breaker.max_fration"),
        ({"detector": {"thermal": {"temp": 90}}}, "detector.thermal.temp"),
    ],
)
def test_an_unknown_key_is_rejected_naming_its_dotted_path(raw: dict[str, Any], path: str) -> None:
    assert config_error(raw) == f"{path}: unknown key"


def test_an_unknown_key_in_a_file_is_rejected_naming_its_dotted_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^store\.uri: unknown key$"):
        config.load(write(tmp_path, '[store]\nuri = "sqlite:///x.db"\n'), environ={})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"policy": {"breaker": {"max_fraction": 1.5}}}, "policy.breaker.max_fraction: must be in (0, 1], got 1.5"),
        ({"policy": {"breaker": {"max_fraction": 0.0}}}, "policy.breaker.max_fraction: must be in (0, 1], got 0.0"),
        ({"policy": {"breaker": {"window_s": -1.0}}}, "policy.breaker.window_s: must be a finite number > 0, got -1.0"),
        ({"policy": {"cooldown_s": -5.0}}, "policy.cooldown_s: must be a finite number >= 0, got -5.0"),
        ({"policy": {"command_ttl_s": 0.0}}, "policy.command_ttl_s: must be a finite number > 0, got 0.0"),
        ({"transport": {"capacity": 0}}, "transport.capacity: must be >= 1, got 0"),
        ({"detector": {"window_samples": 1}}, "detector.window_samples: must be in [2, 100000], got 1"),
        ({"detector": {"thermal": {"temp_c": 200.0}}}, "detector.thermal.temp_c: must be in (0, 150), got 200.0"),
        ({"detector": {"thermal": {"sustain_samples": 0}}}, "detector.thermal.sustain_samples: must be >= 1, got 0"),
        ({"agent": {"interval_s": 0.0}}, "agent.interval_s: must be a finite number > 0, got 0.0"),
        ({"agent": {"node": "bad node; rm -rf /"}}, "agent.node: not a valid node name, got 'bad node; rm -rf /'"),
        (
            {"store": {"url": "sentinel.db"}},
            "store.url: must be a SQLAlchemy URL like sqlite:///path.db, got 'sentinel.db'",
        ),
        ({"metrics": {"listen": "9400"}}, "metrics.listen: must be HOST:PORT, got '9400'"),
        ({"metrics": {"listen": "127.0.0.1:70000"}}, "metrics.listen: must be HOST:PORT, got '127.0.0.1:70000'"),
    ],
)
def test_a_bad_value_is_rejected_naming_the_path_and_the_value(raw: dict[str, Any], message: str) -> None:
    assert config_error(raw) == message


def test_an_unknown_policy_mode_is_rejected_naming_the_path() -> None:
    message = config_error({"policy": {"mode": "yolo"}})
    assert message.startswith("policy.mode: ") and "yolo" in message


@pytest.mark.parametrize(
    "raw",
    [
        {"policy": {"breaker": {"max_fraction": math.nan}}},
        {"policy": {"breaker": {"window_s": math.nan}}},
        {"policy": {"cooldown_s": math.nan}},
        {"policy": {"command_ttl_s": math.nan}},
        {"detector": {"thermal": {"temp_c": math.nan}}},
        {"agent": {"interval_s": math.nan}},
    ],
)
def test_nan_is_rejected_wherever_a_number_is_checked(raw: dict[str, Any]) -> None:
    assert "got nan" in config_error(raw)


def test_nan_written_in_a_toml_file_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "[policy.breaker]\nmax_fraction = nan\n")
    with pytest.raises(ConfigError, match=r"^policy\.breaker\.max_fraction: must be in \(0, 1\], got nan$"):
        config.load(path, environ={})


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"transport": {"capacity": "big"}}, "transport.capacity"),
        ({"transport": {"capacity": True}}, "transport.capacity"),
        ({"transport": {"capacity": 1.5}}, "transport.capacity"),
        ({"policy": {"breaker": {"max_fraction": "0.1"}}}, "policy.breaker.max_fraction"),
        ({"policy": {"opt_out_nodes": "gpu-01"}}, "policy.opt_out_nodes"),
        ({"agent": {"collectors": [1, 2]}}, "agent.collectors"),
        ({"policy": 3}, "policy"),
        ({"policy": {"breaker": []}}, "policy.breaker"),
    ],
)
def test_a_value_of_the_wrong_type_is_rejected_naming_the_path(raw: dict[str, Any], path: str) -> None:
    message = config_error(raw)
    assert message.split(": ", 1)[0].startswith(path)
    assert "Expected" in message


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_max_fraction_is_accepted_exactly_when_in_the_half_open_unit_interval(value: float) -> None:
    raw = {"policy": {"breaker": {"max_fraction": value}}}
    if 0 < value <= 1:
        assert config.from_mapping(raw).policy.breaker.max_fraction == value
    else:
        assert config_error(raw) == f"policy.breaker.max_fraction: must be in (0, 1], got {value!r}"


def test_a_node_name_with_a_trailing_newline_is_rejected() -> None:
    """Regression: NODE_NAME_PATTERN ended in `$`, which re.match also satisfies before a trailing newline."""
    assert config_error({"agent": {"node": "gpu-01\n"}}).startswith("agent.node: ")


# ----- load() ------------------------------------------------------------------------------------------------


def test_loading_a_missing_file_raises_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match="no such file") as info:
        config.load(path, environ={})
    assert str(path) in str(info.value)


def test_loading_invalid_toml_raises_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[policy\nmode = observe\n")
    with pytest.raises(ConfigError, match="not valid TOML") as info:
        config.load(path, environ={})
    assert str(path) in str(info.value)


def test_loading_a_directory_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path, environ={})


def test_loading_a_file_that_is_not_utf8_raises_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[agent]\nnode = "g\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load(path, environ={})


# ----- environment overrides ---------------------------------------------------------------------------------


def test_environment_overrides_apply_to_nested_keys() -> None:
    cfg = config.load(
        None,
        environ={
            "SENTINEL__STORE__URL": "postgresql+psycopg://db/sentinel",
            "SENTINEL__POLICY__BREAKER__MAX_FRACTION": "0.3",
        },
    )
    assert cfg.store.url == "postgresql+psycopg://db/sentinel"
    assert cfg.policy.breaker.max_fraction == 0.3


def test_environment_values_are_read_as_toml_when_they_parse_as_toml() -> None:
    cfg = config.load(
        None,
        environ={
            "SENTINEL__TRANSPORT__CAPACITY": "500",
            "SENTINEL__AGENT__COLLECTORS": '["host", "nvml"]',
            "SENTINEL__POLICY__MODE": "act",
        },
    )
    assert cfg.transport.capacity == 500
    assert cfg.agent.collectors == ["host", "nvml"]
    assert cfg.policy.mode == "act"


def test_an_environment_override_wins_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\nurl = "sqlite:///file.db"\n[policy.breaker]\nwindow_s = 60.0\n')
    cfg = config.load(path, environ={"SENTINEL__STORE__URL": "sqlite:///env.db"})
    assert cfg.store.url == "sqlite:///env.db"
    assert cfg.policy.breaker.window_s == 60.0


def test_variables_without_the_double_underscore_prefix_are_ignored() -> None:
    cfg = config.load(None, environ={"SENTINEL_STORE_URL": "x", "PATH": "/usr/bin", "sentinel__store__url": "x"})
    assert cfg == Config()


def test_an_environment_override_is_validated_like_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^policy\.breaker\.max_fraction: must be in \(0, 1\], got 2\.0$"):
        config.load(None, environ={"SENTINEL__POLICY__BREAKER__MAX_FRACTION": "2.0"})


def test_an_environment_override_of_an_unknown_key_is_rejected_naming_the_path() -> None:
    with pytest.raises(ConfigError, match=r"^policy\.breaker\.nope: unknown key$"):
        config.load(None, environ={"SENTINEL__POLICY__BREAKER__NOPE": "1"})


def test_overriding_a_scalar_from_the_file_as_a_table_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\nurl = "sqlite:///file.db"\n')
    with pytest.raises(ConfigError, match="not a table") as info:
        config.load(path, environ={"SENTINEL__STORE__URL__HOST": "db"})
    assert "SENTINEL__STORE__URL__HOST" in str(info.value)


def test_overriding_a_defaulted_scalar_as_a_table_is_rejected_naming_the_path() -> None:
    with pytest.raises(ConfigError, match=r"^store\.url: "):
        config.load(None, environ={"SENTINEL__STORE__URL__HOST": "db"})


def test_overriding_a_section_with_a_scalar_is_rejected_naming_the_section() -> None:
    with pytest.raises(ConfigError, match=r"^store: "):
        config.load(None, environ={"SENTINEL__STORE": "1"})


def test_an_override_with_an_empty_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match="empty key"):
        config.load(None, environ={"SENTINEL__STORE____URL": "sqlite:///x.db"})


def test_an_infinite_cooldown_is_rejected() -> None:
    with pytest.raises(ConfigError, match="policy.cooldown_s: must be a finite number >= 0, got inf"):
        config.from_mapping({"policy": {"cooldown_s": float("inf")}})
