#!/bin/sh
# gen_certs.sh DIR - test certificates, made at test time (never committed):
#   ca.pem/ca-key.pem          CA 1
#   server.pem/server-key.pem  signed by CA 1, SAN 127.0.0.1, ::1, localhost (serverAuth+clientAuth:
#                              also the peer certificate)
#   client.pem/client-key.pem  signed by CA 1, CN "root" (clientAuth)
#   ca2.pem/ca2-key.pem        CA 2 (another CA)
#   other.pem/other-key.pem    signed by CA 2, same SANs as server.pem
#   proxy.pem/proxy-key.pem    signed by CA 1, no CN (clientAuth): a grpc-proxy's upstream
#                              certificate (etcd's proxy refuses one with a Common Name)
#   domain.pem/domain-key.pem  signed by CA 1, SAN DNS:kvt.test only (serverAuth+clientAuth):
#                              a peer certificate for the DNS SRV domain, not for any host
set -eu
d=$1
mkdir -p "$d"
cd "$d"
cat > ext.cnf <<'X'
[srv]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost
[dom]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:kvt.test
[cli]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
X
mkca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=$2" -keyout "$1-key.pem" -out "$1.pem" 2>/dev/null
}
mkcert() { # name ca subject ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$3" \
        -keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2-key.pem" -CAcreateserial -days 2 \
        -extfile ext.cnf -extensions "$4" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr"
}
mkca ca "kvd test CA"
mkca ca2 "kvd other CA"
mkcert server ca "/CN=kvd member" srv
mkcert client ca /CN=root cli
mkcert other ca2 "/CN=kvd member" srv
mkcert proxy ca "/O=kvd proxy" cli
mkcert domain ca "/CN=kvd member" dom
# revoked.pem/revoked-key.pem: signed by CA 1 like client.pem, CN "root", and listed in
# crl.pem (CA 1's certificate revocation list; etcd's --client-crl-file / --peer-crl-file).
mkcert revoked ca /CN=root cli
mkdir -p crldb
: > crldb/index.txt
echo 01 > crldb/crlnumber
cat > crl.cnf <<'X'
[ca]
default_ca = c
[c]
database = crldb/index.txt
crlnumber = crldb/crlnumber
default_md = sha256
default_crl_days = 2
X
openssl ca -config crl.cnf -keyfile ca-key.pem -cert ca.pem -revoke revoked.pem 2>/dev/null
openssl ca -config crl.cnf -keyfile ca-key.pem -cert ca.pem -gencrl -out crl.pem 2>/dev/null
