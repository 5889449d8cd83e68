#!/usr/bin/env bash
# Makes a private CA and one TLS certificate per service name, for MEGHA_TLS_CERT, MEGHA_TLS_KEY
# and MEGHA_TLS_CA (services/http.py), with the openssl command line tool.
#
#   scripts/make-certs.sh OUT_DIR NAME...
#
# Writes, in OUT_DIR (made if missing):
#   ca.pem, ca.key           the CA (MEGHA_TLS_CA is ca.pem; ca.key only signs, keep it apart)
#   NAME.pem, NAME.key       each NAME's certificate and key (MEGHA_TLS_CERT, MEGHA_TLS_KEY)
# Each certificate names NAME, localhost and 127.0.0.1 (subjectAltName), for server and client
# use. A NAME is a host name (letters, digits, '.', '-'; a worker lm-1/w0 is lm-1-w0) or an IPv4
# address. Existing files are kept: running it again adds only the names it lacks, signed by
# the same CA. Keys are EC P-256, readable by their owner only; certificates last
# MEGHA_CERT_DAYS days (default 825). OUT_DIR gets a .gitignore of `*`: keys are never committed.
# Exit status 2: bad arguments; 1: openssl failed or is missing.
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
if [ "$#" -lt 2 ]; then usage >&2; exit 2; fi
out="$1"
shift
days="${MEGHA_CERT_DAYS:-825}"
for name in "$@"; do
  # the name is a file name and a DNS name here: a slash or a space would break both
  if ! [[ "$name" =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
    echo "make-certs: '$name' is not a host name (letters, digits, '.' and '-')" >&2
    exit 2
  fi
done
if ! [[ "$days" =~ ^[1-9][0-9]*$ ]]; then
  echo "make-certs: MEGHA_CERT_DAYS must be a number of days, got '$days'" >&2
  exit 2
fi

if ! command -v openssl >/dev/null; then
  # Debian's package, as scripts/rabbitmq.sh installs its broker: a fresh machine may lack it
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "make-certs: installing Debian's openssl ..." >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  else
    echo "make-certs: the openssl command is missing (Debian: apt-get install openssl)" >&2
    exit 1
  fi
fi

umask 077
mkdir -p "$out"
[ -e "$out/.gitignore" ] || printf '*\n' > "$out/.gitignore"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -s "$out/ca.pem" ] || [ ! -s "$out/ca.key" ]; then
  new_key "$work/ca.key"
  openssl req -x509 -new -key "$work/ca.key" -sha256 -days "$days" -subj "/CN=megha CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$work/ca.pem"
  # the pair lands together, so a half-made CA is never kept
  mv "$work/ca.key" "$out/ca.key"
  mv "$work/ca.pem" "$out/ca.pem"
  chmod 644 "$out/ca.pem"
  echo "make-certs: made the CA $out/ca.pem" >&2
fi

made=()
for name in "$@"; do
  if [ -s "$out/$name.pem" ] && [ -s "$out/$name.key" ]; then
    continue
  fi
  if [[ "$name" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    alt="IP:$name,DNS:localhost"
    [ "$name" = 127.0.0.1 ] || alt="$alt,IP:127.0.0.1"
  else
    alt="DNS:$name,DNS:localhost,IP:127.0.0.1"
    [ "$name" = localhost ] && alt="DNS:localhost,IP:127.0.0.1"
  fi
  cat > "$work/ext.cnf" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$alt
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
EOF
  new_key "$work/$name.key"
  openssl req -new -key "$work/$name.key" -subj "/CN=$name" -out "$work/$name.csr"
  openssl x509 -req -in "$work/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
    -extfile "$work/ext.cnf" -out "$work/$name.pem" 2>/dev/null
  mv "$work/$name.key" "$out/$name.key"
  mv "$work/$name.pem" "$out/$name.pem"
  chmod 644 "$out/$name.pem"
  made+=("$name")
done
if [ "${#made[@]}" -gt 0 ]; then
  echo "make-certs: made certificates for ${made[*]} in $out" >&2
fi
