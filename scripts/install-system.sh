#!/usr/bin/env bash
# Installs the Debian packages the embedded stack needs, only those that are missing (iptables:
# the partitionable network shape cuts and shapes links with it). A JDK, not
# only a JRE: `outboxkit dev stack install` compiles the project's Connect transform (cdc/java/smt).
# chromium: the browser tests (tests/browser) drive it headless through Playwright; fonts-liberation
# (only a recommend of chromium's, which --no-install-recommends leaves out): fonts with the
# metrics of Arial, Times and Courier, so pages and the docs' screenshots render text readably.
# nginx-light: the console's test behind a reverse proxy runs the how-to page's nginx block.
# No package's service is started: the stack and the tests start their own on loopback ports.
set -euo pipefail
packages=(postgresql-15 openjdk-17-jdk-headless maven python3-venv iptables chromium fonts-liberation
  nginx-light)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: present (${packages[*]})"
  exit 0
fi
echo "system packages: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d  # while installing, services may not start (Debian's policy layer)
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
  "${sudo_cmd[@]}" chmod 755 "$policy"
  trap '"${sudo_cmd[@]}" rm -f "$policy"' EXIT
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "system packages: installed ${missing[*]}"
