#!/usr/bin/env bash
# Static checks of the Docker files, which need no Docker engine. CI also builds the
# image and runs the compose file on one (scripts/docker-check.sh); these check what
# that run does not show, or shows only with its stand-in base images:
# - the Dockerfile builds with exactly `cargo build --release --locked -p ledger -p
#   ledgerctl`, and that command succeeds here (its binaries are the ones the image
#   ships);
# - every file the Dockerfile COPYs from the context exists, and every build script
#   of the workspace and the templates' configuration (askama.toml) are among them (a
#   package built without its build.rs lacks the code it generates, and without
#   askama.toml the console's templates are looked for in the wrong folder; the build
#   here, from the whole checkout, cannot show either);
# - every LEDGER_* setting in the Dockerfile and docker-compose.yml is one that
#   `ledger serve --help` documents, and the compose file has the shape the README
#   promises (MySQL 8.4 with a healthcheck, the ledger waiting for it, 50051 and
#   9090 published unless told otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "check-docker: $*" >&2; exit 1; }

builds=$(grep -oE 'cargo build[^&\\]*' Dockerfile | sed 's/[[:space:]]*$//' | sort -u)
[ "$builds" = "cargo build --release --locked -p ledger -p ledgerctl" ] || fail "unexpected build commands: $builds"
echo "building as the Dockerfile does: $builds"
$builds

# COPY sources: every word after COPY but the last (the destination), skipping --from copies.
grep -E '^COPY ' Dockerfile | grep -v -- '--from=' | while read -r _ rest; do
  set -- $rest
  while [ $# -gt 1 ]; do
    [ -e "$1" ] || fail "Dockerfile COPYs $1, which does not exist"
    shift
  done
done

# A file the build reads is copied when it, or a folder that holds it, is a COPY source.
copied=$(grep -E '^COPY ' Dockerfile | grep -v -- '--from=' | sed 's/^COPY //' | tr ' ' '\n')
for script in $(find . \( -path ./target -o -path ./.git \) -prune -o \( -name build.rs -o -name askama.toml \) -print | sed 's|^\./||'); do
  path=$script
  until grep -qx "$path" <<<"$copied"; do
    [ "$path" != "${path%/*}" ] || fail "Dockerfile does not COPY $script"
    path=${path%/*}
  done
done

documented=$(target/release/ledger serve --help | grep -oE 'env: LEDGER_[A-Z_]+' | sed 's/env: //' | sort -u)
used=$( (grep -oE 'LEDGER_[A-Z_]+' Dockerfile docker-compose.yml | cut -d: -f2) | sort -u)
for key in $used; do
  grep -qx "$key" <<<"$documented" || fail "$key is not a setting of ledger serve"
done

python3 - <<'PY'
import sys
try:
    import yaml
except ImportError:
    import subprocess
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "pyyaml"])
    import yaml
compose = yaml.safe_load(open("docker-compose.yml"))
services = compose["services"]
mysql, ledger = services["mysql"], services["ledger"]
assert mysql["image"].startswith("mysql:8.4"), mysql["image"]
assert "test" in mysql["healthcheck"], "mysql needs a healthcheck"
assert ledger["depends_on"]["mysql"]["condition"] == "service_healthy"
url = ledger["environment"]["LEDGER_DATABASE_URL"]
assert url.startswith("mysql://") and "@mysql:3306/" in url, url
# CI publishes on ports of its own; by default they are the documented ones.
import re
ports = [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", p) for p in ledger["ports"]]
assert ports == ["50051:50051", "9090:9090"], ports
print("docker-compose.yml: ok")
PY
echo "Dockerfile: ok"
