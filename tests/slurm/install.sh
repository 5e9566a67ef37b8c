#!/usr/bin/env bash
# Debian's Slurm and munge for the slurm tests (tests/slurm): installed with apt-get only when a
# program is missing, as tests/ui/run.sh installs Chromium. A failed install fails loudly. The
# tests start their own cluster (tests/slurm/cluster.py); nothing here starts a daemon.
set -euo pipefail
missing=""
for prog in munged mungekey slurmctld slurmd sbatch squeue scontrol srun salloc; do
  command -v "$prog" >/dev/null 2>&1 || missing="$missing $prog"
done
[ -z "$missing" ] && exit 0
echo "== installing Slurm and munge (apt-get; missing:$missing)"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    slurmctld slurmd slurm-client munge >/dev/null; }; then
  echo "!! FAILED: apt-get install slurmctld slurmd slurm-client munge (see apt-get's errors above)" >&2
  exit 1
fi
