#!/usr/bin/env bash
# README's first Quick start command: installs what is missing, builds, and runs the main example.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/build.sh" "$root/build/release"
"$root/build/release/bin/train_cnn" --out "$root/runs/cnn" "$@"
