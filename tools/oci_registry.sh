#!/usr/bin/env bash
# The OCI registry tests/test_registry_oci.py starts on 127.0.0.1: the CNCF distribution registry
# (Debian's docker-registry) and Apache's htpasswd (apache2-utils) for its bcrypt password file.
# Idempotent and offline on a rerun: apt is asked only when a binary is missing, and only where apt
# exists and we are root (CI); elsewhere the tests skip with a line saying what to install.
set -euo pipefail
need=()
command -v docker-registry >/dev/null 2>&1 || command -v registry >/dev/null 2>&1 || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "tools/oci_registry.sh: ${need[*]} missing (apt-get install ${need[*]}); the OCI registry tests will skip" >&2
  exit 0
fi
echo "tools/oci_registry.sh: apt-get install ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# The tests run their own registry process; the package's service is not used.
apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
  apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
}
