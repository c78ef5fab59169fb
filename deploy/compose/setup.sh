#!/usr/bin/env bash
# Makes what deploy/compose needs and must not be in git: a demo CA and a
# certificate per region's nats-server (the shipped configs/nats/*.conf
# require TLS on clients, routes and gateways), and .env with a random
# password per NATS user and the API tokens. compose.yaml reads .env.
#
#   deploy/compose/setup.sh [DIR]    (DIR: where compose.yaml is; default
#                                     this script's directory)
#
# Run it once; it refuses to overwrite an existing .env (remove .env and
# secrets/ to start over: the nats-servers' and replicas' volumes then
# need `docker compose down -v` too). Needs openssl.
set -euo pipefail

dir=${1:-$(dirname "$0")}
regions=(us eu ap)
if [ -e "$dir/.env" ]; then
  echo "$0: $dir/.env exists; remove it and $dir/secrets to make new secrets" >&2
  exit 1
fi
command -v openssl >/dev/null 2>&1 || { echo "$0: needs openssl (apt-get install openssl)" >&2; exit 1; }
umask 077
secrets=$dir/secrets
mkdir -p "$secrets"

# The CA: nats-servers verify each other's route and gateway certificates
# with it, and the replicas verify their nats-server's.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -subj "/CN=tally compose demo CA" -keyout "$secrets/ca-key.pem" -out "$secrets/ca.pem" 2>/dev/null
for r in "${regions[@]}"; do
  # One server per region answers for all three names the shipped config
  # routes and gateways to (compose.yaml gives it those aliases).
  san="DNS:nats-a.$r.tally.internal,DNS:nats-b.$r.tally.internal,DNS:nats-c.$r.tally.internal,DNS:localhost"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=nats-$r" \
    -keyout "$secrets/nats-$r-key.pem" -out "$secrets/nats-$r.csr" 2>/dev/null
  openssl x509 -req -in "$secrets/nats-$r.csr" -CA "$secrets/ca.pem" -CAkey "$secrets/ca-key.pem" \
    -CAcreateserial -days 825 -out "$secrets/nats-$r.pem" \
    -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san") 2>/dev/null
  rm "$secrets/nats-$r.csr"
done
rm -f "$secrets/ca.srl"
chmod 0644 "$secrets/ca.pem" # the replicas' containers read it as tally

{
  echo "# deploy/compose secrets, made by setup.sh. Do not commit."
  for v in NATS_ROUTE_PASSWORD NATS_GATEWAY_PASSWORD NATS_SYS_PASSWORD \
    TALLY_US_1_NATS_PASSWORD TALLY_EU_1_NATS_PASSWORD TALLY_AP_1_NATS_PASSWORD \
    TALLY_AUTHORITY_NATS_PASSWORD TALLY_APPS_NATS_PASSWORD TALLY_ADMIN_NATS_PASSWORD \
    TALLY_WRITE_TOKEN TALLY_ADMIN_TOKEN; do
    echo "$v=$(openssl rand -hex 16)"
  done
} >"$dir/.env"
echo "wrote $dir/.env and $secrets/; next: docker compose -f $dir/compose.yaml up -d --build"
