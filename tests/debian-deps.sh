#!/usr/bin/env bash
# Install the Debian packages whose tools the tests call, when a tool is missing (fresh machine, CI).
# One line per tool: "command package". Services (PostgreSQL, ...) are installed by tests/services.sh.
set -euo pipefail

NEEDED=(
    "systemd-analyze systemd"
    "promtool prometheus"
    "prometheus prometheus"
    "amtool prometheus-alertmanager"  # checks deploy/alertmanager/alertmanager.yml
    "munged munge"              # the Slurm test cluster (tests/slurm.sh, the `slurm` service of tests/services.sh)
    "slurmctld slurmctld"
    "slurmd slurmd"
    "sbatch slurm-client"
)

missing=()
for entry in "${NEEDED[@]}"; do
    read -r tool package <<<"$entry"
    command -v "$tool" >/dev/null 2>&1 || [[ -x "/usr/sbin/$tool" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
[[ "$(id -u)" -eq 0 ]] || { echo "debian-deps: need root to install: ${missing[*]}" >&2; exit 1; }
echo "debian-deps: installing ${missing[*]}" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
