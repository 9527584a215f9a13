"""A throw-away certificate authority for test clusters: serving and client certificates on disk."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def write_key(path: Path, key: Any) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class CertificateAuthority:
    """A CA that signs the apiserver's serving certificate and the admin client certificate."""

    def __init__(self, directory: Path, *, now: datetime.datetime) -> None:
        self.directory = directory
        self.now = now
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpugate-e2e-ca")])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = directory / "ca.crt"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        *,
        common_name: str,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - datetime.timedelta(hours=1))
            .not_valid_after(self.now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(pair.key, key)
        return pair
