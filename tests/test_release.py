"""The release (issue 17): the wheel `make dist` builds installs into a fresh virtualenv and works there —
`--version`, `config check` on the example config it ships, `demo`, `check` — and lays out the units, rules,
dashboard and samples an operator needs under <prefix>/share/sentinel."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_built_wheel_installs_into_a_fresh_virtualenv_and_runs(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path / "dist"),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("sentinel_gpu-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    sentinel = str(venv / "bin" / "sentinel")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sentinel, *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    assert run("--version").stdout.strip() == "sentinel 0.1.0"
    share = venv / "share" / "sentinel"
    for shipped in ("systemd/sentinel-agent.service", "systemd/sentinel-controller.service",
                    "prometheus/sentinel-rules.yml", "grafana/sentinel-fleet.json", "alertmanager/alertmanager.yml",
                    "kubernetes/agent.yaml", "sentinel.example.toml"):
        assert (share / shipped).is_file(), shipped
    checked = run("config", "check", str(share / "sentinel.example.toml"))
    assert checked.returncode == 0 and "valid" in checked.stdout, checked.stderr
    demo = run("demo", "--duration", "30m", "--db-path", str(tmp_path / "demo.db"), "-o", "json")
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert '"faults_injected": 6' in demo.stdout
    node = run("check")  # no GPU here: a clear result and the documented exit code
    assert node.returncode == 1 and "no NVIDIA driver" in node.stdout
    with zipfile.ZipFile(wheel) as archive:  # the product's four import roots, no benchmark (decision 0017)
        tops = {name.split("/")[0] for name in archive.namelist() if not name.split("/")[0].endswith((".dist-info",
                                                                                                    ".data"))}
        assert tops == {"sentinel", "sentinel_collectors", "sentinel_models", "sentinel_migrations"}
        assert "sentinel_collectors/kmsg_patterns.toml" in archive.namelist()
        assert "sentinel_models/shipped/hazard/model.joblib" in archive.namelist()
        entry_points = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        assert "sentinel-bench" not in archive.read(entry_points).decode()
    assert not (venv / "bin" / "sentinel-bench").exists()
    # docs/operations.md "Install on a Slurm cluster" on a fresh prefix: install (units, configs, keygen), then
    # the store, then the CLI reading the services' config
    root = tmp_path / "root"
    installed = run("install", "--prefix", str(root))
    assert installed.returncode == 0, installed.stderr
    config = str(root / "etc" / "sentinel" / "sentinel.toml")
    assert run("config", "check", config).returncode == 0
    assert run("config", "check", str(root / "etc" / "sentinel" / "agent.toml")).returncode == 0
    assert run("--config", config, "db", "upgrade").returncode == 0
    status = run("--config", config, "status", "-o", "json")
    assert status.returncode == 0 and str(root / "var" / "lib" / "sentinel") in status.stdout, status.stderr
    # the wheel's model is on by default, and loads under the installed config's site key (issue 35)
    assert json.loads(status.stdout)["hazard_model"] == "shipped", status.stdout
    listed = json.loads(run("--config", config, "model", "list", "-o", "json").stdout)
    assert [(m["name"], m["in_use"], m["verified"]) for m in listed] == [("shipped", True, "ok")]
    # the benchmarks are their own distribution, installed beside the product's wheel
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path / "dist"),
                    str(ROOT / "benchmarks")], check=True, capture_output=True, timeout=300)
    [bench_wheel] = (tmp_path / "dist").glob("sentinel_bench-*.whl")
    with zipfile.ZipFile(bench_wheel) as archive:
        assert {name.split("/")[0] for name in archive.namelist() if ".dist-info" not in name} == {"sentinel_bench"}
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(bench_wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    bench = subprocess.run([str(venv / "bin" / "sentinel-bench"), "detect", "--scenario", "smoke", "--max-steps",
                            "200", "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bench.returncode == 0 and json.loads(bench.stdout)["model"]["name"] == "shipped", bench.stderr[-2000:]
    units = sorted((root / "etc" / "systemd" / "system").glob("*.service"))
    assert len(units) == 4 and all(f"{venv}/bin/sentinel " in u.read_text() for u in units)
    verified = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True,
                              timeout=120)
    assert verified.returncode == 0 and verified.stderr.strip() == "", verified.stderr
