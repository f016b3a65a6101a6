"""Serving over TLS, as kube-apiserver always does: a cluster CA made at start and a serving certificate it signs
for the names clients use (``127.0.0.1``, ``localhost``, ``kubernetes.default.svc`` and its longer forms, the
listening host). Clients trust the CA through the kubeconfig's ``certificate-authority-data``; kubectl and
client-go send a kubeconfig's credentials only over TLS, which is why an RBAC cluster serves it."""

from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: what in-cluster clients call the API server, and so the name pods' kubeconfigs verify (``tls-server-name``)
IN_CLUSTER_NAME = "kubernetes.default.svc"
_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", IN_CLUSTER_NAME, f"{IN_CLUSTER_NAME}.cluster.local")


@dataclass(frozen=True)
class ServingCertificates:
    ca_pem: bytes
    context: ssl.SSLContext


def make_serving_certificates(host: str) -> ServingCertificates:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC) - timedelta(minutes=5)
    until = now + timedelta(days=365)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ttj-local-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    addresses = {ipaddress.ip_address("127.0.0.1")}
    names = set(_DNS_NAMES)
    try:
        addresses.add(ipaddress.ip_address(host))
    except ValueError:
        names.add(host)
    alternative = [x509.DNSName(n) for n in sorted(names)] + [x509.IPAddress(a) for a in sorted(addresses, key=str)]
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # ssl loads a chain from files only: written to a private temporary file and removed at once
    fd, path = tempfile.mkstemp(prefix="ttj-local-serving-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(serving.public_bytes(pem) + key_pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)
    return ServingCertificates(ca.public_bytes(pem), context)
