"""The `sentinel` command as an operator uses it: real subprocesses for the entry point, main() for the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sentinel.cli.main import main

SENTINEL = [sys.executable, "-m", "sentinel.cli"]


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SENTINEL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sentinel_bench.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_help_lists_every_operator_verb_and_no_benchmark() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for verb in ("run", "demo", "config", "db", "nodes", "incidents", "status", "breaker", "forecast", "advise"):
        assert f"    {verb}" in result.stdout
    assert "    bench" not in result.stdout and "benchmark" not in result.stdout.lower()


def test_the_benchmarks_have_their_own_command() -> None:
    result = _bench("--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: sentinel-bench")
    for name in ("codec", "agent", "pipeline", "detect", "goodput", "chaos", "calibration", "smd", "asd",
                 "forecast", "forecast-jobs", "forecast-fleet", "alerting", "actuate"):
        assert f"    {name}" in result.stdout, name


def test_config_check_prints_the_normalised_config(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text('[policy]\nmode = "act"\n[policy.breaker]\nmax_fraction = 0.2\n')
    result = _run("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    assert 'mode = "act"' in result.stdout and "max_fraction = 0.2" in result.stdout
    assert '[store]\nurl = "sqlite:///sentinel.db"' in result.stdout  # defaults are shown too


@pytest.mark.parametrize(("body", "message"), [
    ("[policy.breaker]\nmax_fraction = 1.5\n", "policy.breaker.max_fraction: must be in (0, 1], got 1.5"),
    ("[policy]\nmood = 'act'\n", "policy.mood: unknown key"),
    ("[detector.thermal]\ntemp_c = 'hot'\n", "detector.thermal.temp_c: Expected `float`, got `str`"),
    ("[actuator]\nkind = 'slrum'\n", "actuator.kind: unknown 'slrum'; valid: dryrun"),
    ("[policy\n", "not valid TOML"),
])
def test_config_check_names_the_path_of_a_bad_value_and_fails(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    result = _run("config", "check", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = _run("--debug", "config", "check", str(tmp_path / "missing.toml"))
    assert result.returncode == 1 and "Traceback" in result.stderr and "no such file" in result.stderr


def test_bad_usage_exits_2() -> None:
    assert _run("incidents", "--output", "xml").returncode == 2


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    assert main(["demo", "--nodes", "12", "--duration", "40m", "--db-path", str(path), "--json"]) == 0
    return path


def test_incidents_table_and_json_agree(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "--db", str(demo_db), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["status"] == "mitigated" for r in rows)
    assert main(["incidents", "--db", str(demo_db)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["INCIDENT", "NODE", "STATUS"]
    assert all(r["id"] in table for r in rows)


def test_incidents_filter_by_node_and_since(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "--db", str(demo_db), "-o", "json"]) == 0
    node = json.loads(capsys.readouterr().out)[0]["node"]
    assert main(["incidents", "--db", str(demo_db), "--node", node, "-o", "json"]) == 0
    assert {r["node"] for r in json.loads(capsys.readouterr().out)} == {node}
    assert main(["incidents", "--db", str(demo_db), "--since", "1s", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # the demo's history ended before "now - 1 s"


def test_a_node_name_that_could_be_an_injection_is_refused(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "--db", str(demo_db), "--node", "x; rm -rf /"]) == 1
    assert "not a valid node name" in capsys.readouterr().err


def test_nodes_and_status_read_the_store(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--db", str(demo_db), "-o", "json"]) == 0
    nodes = json.loads(capsys.readouterr().out)
    assert len(nodes) == 12 and {n["state"] for n in nodes} >= {"ok", "drained"}
    assert main(["status", "--db", str(demo_db), "-o", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["nodes"] == 12 and status["drained_nodes"] == sum(n["state"] == "drained" for n in nodes)


def test_breaker_reset_closes_an_open_breaker(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sentinel.policy.breaker import BreakerState
    from sentinel.store.engine import make_engine
    from sentinel.store.repository import Repository

    repo = Repository(make_engine(f"sqlite:///{demo_db}"))
    repo.save_breaker(BreakerState(True, "test storm", 1.0, []))
    assert main(["breaker", "--db", str(demo_db), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["open"] is True
    assert main(["breaker", "reset", "--db", str(demo_db)]) == 0
    assert "closed" in capsys.readouterr().out
    assert repo.load_breaker().is_open is False


def test_db_upgrade_then_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "s.db")
    assert main(["db", "current", "--db", db]) == 1  # not migrated yet
    capsys.readouterr()
    assert main(["db", "upgrade", "--db", db]) == 0
    assert main(["db", "current", "--db", db, "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["up_to_date"] is True


def test_reading_a_store_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    result = _run("nodes", "--db", str(tmp_path / "nope.db"))
    assert result.returncode == 1 and result.stderr.startswith("error: no store at")


def test_run_collects_this_host_and_records_it(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    result = _run("run", "--db", str(db), "--cycles", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 node(s)" in result.stderr
    assert main(["nodes", "--db", str(db), "-o", "json"]) == 0


def test_bench_codec_reports_every_codec_as_json() -> None:
    result = _bench("codec", "--messages", "300", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    codecs = data["codecs"]
    assert "msgspec-json (ours, validated)" in codecs
    assert all(v["decode_msgs_per_s"] > 0 for v in codecs.values())
    # on the broker: each sample compressed alone (as agents send them) takes more than its share of a batch
    wire = data["compression"]
    assert wire["json+none"]["bytes_per_msg_alone"] == wire["json+none"]["bytes_per_msg"]
    assert wire["json+gzip"]["bytes_per_msg"] < wire["json+gzip"]["bytes_per_msg_alone"] < wire["json+none"][
        "bytes_per_msg"]


def test_bench_agent_reports_the_cost_of_a_cycle_as_json() -> None:
    result = _bench("agent", "--cycles", "20", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cpu_us_per_cycle"] > 0 and data["goal_pct_at_1hz"] == 0.3
    assert {"nvml (8 fake GPUs)", "nic (this host's /sys)", "kmsg (file tail)", "host (/proc)"} <= set(
        data["cpu_us_by_part"])


def test_collect_once_prints_a_snapshot_as_json() -> None:
    result = _run("collect", "--once", "-o", "json")
    assert result.returncode == 0, result.stderr
    sample = json.loads(result.stdout)["sample"]
    assert sample["seq"] == 1 and sample["host"]["boot_id"] and isinstance(sample["nics"], list)


def test_parse_log_prints_one_json_object_per_recognised_line(data_dir: Path) -> None:
    result = _run("parse-log", str(data_dir / "xid_lines.txt"), "-o", "json")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    xids = [e for e in events if e["kind"] == "xid"]
    assert len(xids) >= 50 and all(isinstance(e["xid"], int) and e["pci"] for e in xids)
    assert {48, 119, 145} <= {e["xid"] for e in xids}


def test_the_agent_refuses_the_embedded_transport_with_the_fix() -> None:
    result = _run("agent", "--cycles", "1")
    assert result.returncode == 1 and 'needs "kafka"' in result.stderr


def test_the_documented_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parent.parent / "docs" / "sentinel.example.toml"
    result = _run("config", "check", str(example))
    assert result.returncode == 0, result.stderr
