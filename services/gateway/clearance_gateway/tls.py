"""The gateway's TLS: always HTTPS (the API server sends user names and groups to it).

A certificate and key from ``CLEARANCE_GATEWAY_TLS_CERT`` / ``_KEY`` (PEM; the cert file
may hold the chain). With neither set, a self-signed pair for local use is made with
``cryptography`` and kept in ``CLEARANCE_GATEWAY_TLS_DIR`` (reused while it has a week
left, so a client that trusts it keeps trusting it across restarts): its names are
``localhost``, this host's name, 127.0.0.1 and ::1. ``CLEARANCE_GATEWAY_CLIENT_CA`` is
the CA of mutual TLS: with ``CLEARANCE_GATEWAY_AUTH=mtls`` every client must present a
certificate it signed in the handshake; with ``mtls-or-token`` a client may present one
(one it did not sign still fails the handshake) or else authenticate with a bearer token.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from clearance_runtime.process import logs

log = logs.get(__name__)

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
VALID_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=7)


def server_context(*, cert: Path | None, key: Path | None, client_ca: Path | None,
                   self_signed_dir: Path | None,
                   client_certificate: bool | None = True) -> tuple[ssl.SSLContext, Path]:
    """The server's TLS context and the certificate file it serves. With ``client_ca``:
    ``client_certificate`` True requires a client certificate it signed, None accepts
    one (verified) or none; False ignores the CA."""
    if (cert is None) != (key is None):
        raise SystemExit("invalid configuration: set both CLEARANCE_GATEWAY_TLS_CERT and "
                         "CLEARANCE_GATEWAY_TLS_KEY, or neither (a self-signed pair)")
    if cert is None or key is None:
        cert, key = self_signed(self_signed_dir or Path(tempfile.gettempdir())
                                / "clearance-gateway")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if client_ca is not None and client_certificate is not False:
        ctx.verify_mode = ssl.CERT_REQUIRED if client_certificate else ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cafile=str(client_ca))
    return ctx, cert


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and key in ``directory`` (made, or reused if valid)."""
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    now = datetime.datetime.now(datetime.UTC)
    if cert_path.exists() and key_path.exists():
        existing = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if existing.not_valid_after_utc - now > RENEW_BEFORE:
            return cert_path, key_path
    directory.mkdir(parents=True, exist_ok=True)
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "clearance-gateway")])
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    host = socket.gethostname()
    if host and host != "localhost":
        names.append(x509.DNSName(host))
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        # Its own CA, so that clients can trust exactly this file (curl --cacert, the
        # webhook kubeconfig's certificate-authority).
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(private, hashes.SHA256())
    )
    key_bytes = private.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(key_bytes)
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    log.warning("gateway_self_signed", certificate=str(cert_path),
                note="for local use; set CLEARANCE_GATEWAY_TLS_CERT/KEY in production")
    return cert_path, key_path
