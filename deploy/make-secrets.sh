#!/usr/bin/env bash
# Generate this deployment's secrets: one random password per file under DIR/secrets/, and
# DIR/.env from .env.example with a fresh KRaft cluster id. DIR defaults to this script's folder.
# Existing files are kept (re-running never rotates a password behind a running cluster's back);
# delete a file and re-run to rotate it, then `docker compose up -d` the services that use it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:-$here}"
secrets="$dir/secrets"

# Postgres login roles (<role>.password, as OUTBOXKIT_SECRETS_DIR expects them), the Kafka
# principals (kafka-<principal>.password), the Connect REST API user, Grafana's admin and the
# operator console (its session key, its users file and its first operator's password).
ROLES=(postgres orders payments shipping outboxkit_cdc)
KAFKA_PRINCIPALS=(admin connect setup orders payments shipping console)

random_password() {
  # 32 letters and digits: no character any of JAAS, SCRAM or libpq would need escaped.
  LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 32 || true
}

# FILE CONTENT: created once. The files are world-readable (the containers' users differ) but sit
# in a 0700 directory: on the host only its owner reaches them; Compose bind-mounts each file.
# No trailing line break: Connect's DirectoryConfigProvider hands a file's bytes over verbatim.
write_secret() {
  local file="$1" content="$2"
  [[ -s "$file" ]] && return 0
  (umask 022 && printf '%s' "$content" >"$file.partial")
  mv "$file.partial" "$file"
  echo "generated $file"
}

mkdir -p "$secrets"
chmod 0700 "$secrets"
for role in "${ROLES[@]}"; do
  write_secret "$secrets/$role.password" "$(random_password)"
done
for principal in "${KAFKA_PRINCIPALS[@]}"; do
  write_secret "$secrets/kafka-$principal.password" "$(random_password)"
done
write_secret "$secrets/connect-rest.password" "$(random_password)"
write_secret "$secrets/grafana-admin.password" "$(random_password)"
# The key that signs the console's session cookies: 64 letters and digits (~380 random bits).
write_secret "$secrets/console-session.key" \
  "$(LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 64 || true)"

# The console's users file (`NAME ROLE HASH` lines, as `outboxkit console-user` writes them) with
# one operator, `operator`, whose password is console-operator.password (for the person, not
# mounted in any container). Written only when the users file does not exist: users added since
# are kept, and a running console's logins never change behind its back. To rotate, delete both
# files and re-run. The hash is outboxkit.console.auth.hash_password's: scrypt (n=16384, r=8,
# p=1, 32 bytes) of the password with 16 random bytes of salt, both urlsafe base64 without '='.
# It is made with python3's standard library (hashlib.scrypt), as python3 is on any host that
# runs this script; the password goes to it on stdin, never on a command line.
console_users="$secrets/console.users"
if [[ ! -s "$console_users" ]]; then
  if ! command -v python3 >/dev/null; then
    echo "make-secrets.sh: python3 is needed to hash the console operator's password" >&2
    exit 1
  fi
  write_secret "$secrets/console-operator.password" "$(random_password)"
  (umask 022 && python3 -c '
import base64, hashlib, os, sys
typed = sys.stdin.read().encode()
salt = os.urandom(16)
digest = hashlib.scrypt(typed, salt=salt, n=16384, r=8, p=1, dklen=32)
b64 = lambda data: base64.urlsafe_b64encode(data).decode().rstrip("=")
print("operator", "operator", "$".join(["scrypt", "16384", "8", "1", b64(salt), b64(digest)]))
' <"$secrets/console-operator.password" >"$console_users.partial")
  mv "$console_users.partial" "$console_users"
  echo "generated $console_users (user operator, password in $secrets/console-operator.password)"
fi

env_file="$dir/.env"
if [[ ! -s "$env_file" ]]; then
  cluster_id=""
  until [[ -n "$cluster_id" && "$cluster_id" != -* ]]; do  # never mistaken for an option
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' | head -c 22)"
  done
  sed "s/^KAFKA_CLUSTER_ID=.*/KAFKA_CLUSTER_ID=$cluster_id/" "$here/.env.example" >"$env_file"
  echo "generated $env_file"
fi

# Connect's REST users file (PropertyFileLoginModule: "user: password"), for the user in .env.
rest_user="$(sed -n 's/^CONNECT_REST_USER=//p' "$env_file" | tail -n 1)"
rest_user="${rest_user:-outboxkit}"
users="$secrets/connect-rest.users"
(umask 022 && printf '%s: %s\n' "$rest_user" "$(cat "$secrets/connect-rest.password")" \
  >"$users.partial")
mv "$users.partial" "$users"
