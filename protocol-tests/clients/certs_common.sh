# make_broker_certs DIR LOG: a CA (DIR/ca.pem) and the broker's PEM keystore for localhost and
# 127.0.0.1 (DIR/broker-keystore.pem: key, then chain, as Kafka's PEM keystore), openssl's
# messages appended to LOG; fails if any step does. Sourced by tls_common.sh and test_java.sh.
make_broker_certs() (
    log=$2
    ossl() { openssl "$@" 2>>"$log"; }
    cd "$1" &&
        ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice test CA" -keyout ca.key -out ca.pem &&
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext &&
        ossl req -newkey rsa:2048 -nodes -subj "/CN=broker" -keyout broker.key -out broker.csr &&
        ossl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out broker.crt &&
        cat broker.key broker.crt ca.pem >broker-keystore.pem
)

# make_client_cert DIR CN LOG: a client certificate for CN from DIR's CA (make_broker_certs):
# DIR/client.key and DIR/client.crt, and DIR/client-keystore.pem (key, then certificate, as
# Kafka's PEM keystore), openssl's messages appended to LOG; fails if any step does.
make_client_cert() (
    log=$3
    ossl() { openssl "$@" 2>>"$log"; }
    cd "$1" &&
        printf 'extendedKeyUsage=clientAuth\n' >client.ext &&
        ossl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout client.key -out client.csr &&
        ossl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile client.ext -out client.crt &&
        cat client.key client.crt >client-keystore.pem
)
