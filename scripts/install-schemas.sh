#!/usr/bin/env bash
# Installs the custom resources' schemas tests/unit/test_kubernetes.py validates the Kubernetes
# manifests against, from the registries and at the versions pinned in
# tests/schemas/kubernetes/sources.toml, into ~/.cache/outboxkit/schemas/<digest of the pins>/
# (OUTBOXKIT_CACHE_DIR moves ~/.cache/outboxkit); skipped when that directory is complete.
#   Strimzi: the npm package, its dependencies as package-lock.json locks them (npm ci).
#   Spark operator: the SparkApplication CRD, out of the operator's Go module zip (sha256 checked).
# Needs node and npm (Debian's nodejs and npm are installed when missing), curl and python3.
# Usage: bash scripts/install-schemas.sh          install what is missing
#        bash scripts/install-schemas.sh --lock   rewrite package-lock.json from the npm pin
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pins=tests/schemas/kubernetes/sources.toml
lock=tests/schemas/kubernetes/package-lock.json

pin() {
  local value
  value="$(sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$pins")"
  [ -n "$value" ] || { echo "schemas: $pins pins no $1" >&2; exit 1; }
  echo "$value"
}
strimzi_npm="$(pin strimzi_npm)"
spark_module="$(pin spark_operator_module)"
spark_sha256="$(pin spark_operator_zip_sha256)"
spark_crd="$(pin spark_operator_crd)"

package_json() {  # the npm pin as the package.json npm ci installs from
  printf '{"name": "outboxkit-schemas", "private": true, "dependencies": {"%s": "%s"}}\n' \
    "${strimzi_npm%@*}" "${strimzi_npm##*@}" > "$1/package.json"
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "schemas: installing Debian's nodejs and npm (the Strimzi validators run on node)"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

if [ "${1:-}" = "--lock" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  package_json "$work"
  echo "schemas: locking $strimzi_npm and its dependencies into $lock"
  (cd "$work" && npm install --package-lock-only --ignore-scripts --no-audit --no-fund \
    --loglevel=error)
  cp "$work/package-lock.json" "$lock"
  exit 0
fi

digest="$(cat "$pins" "$lock" | sha256sum | cut -c1-16)"
cache="${OUTBOXKIT_CACHE_DIR:-$HOME/.cache/outboxkit}/schemas"
target="$cache/$digest"
if [ -f "$target/complete" ]; then
  echo "schemas: $target up to date ($strimzi_npm, $spark_module)"
  exit 0
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.install-XXXXXX")"
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

echo "schemas: npm ci $strimzi_npm (locked by $lock) into $target/npm"
mkdir "$work/npm"
package_json "$work/npm"
cp "$lock" "$work/npm/package-lock.json"
(cd "$work/npm" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)

module="${spark_module%@*}"
version="${spark_module##*@}"
# The proxy's module path escapes each capital letter as ! and its lower case.
url="https://proxy.golang.org/$(echo "$module" | sed 's/[A-Z]/!\L&/g')/@v/$version.zip"
echo "schemas: $spark_module from $url, $spark_crd into $target/spark-operator"
curl -fsSL --retry 3 -o "$work/module.zip" "$url"
echo "$spark_sha256  $work/module.zip" | sha256sum --check --quiet - || {
  echo "schemas: $url does not have the sha256 $pins pins" >&2
  exit 1
}
mkdir "$work/spark-operator"
python3 - "$work/module.zip" "$spark_module" "$spark_crd" "$work/spark-operator" <<'EOF'
import sys
import zipfile
from pathlib import Path

archive, module, crd, out = sys.argv[1:]
with zipfile.ZipFile(archive) as z:
    for name in (crd, "LICENSE"):
        (Path(out) / Path(name).name).write_bytes(z.read(f"{module}/{name}"))
EOF
rm "$work/module.zip"

echo "$strimzi_npm $spark_module" > "$work/complete"
rm -rf "$target"
mv "$work" "$target"
echo "schemas: installed into $target"
