"""Build the CA and serving certificate the apiserver trusts gpugate with; write them for `gpugate certs`."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .terminal import EXIT_BAD_INPUT, EXIT_OK

# Certificates start a little in the past: nodes' clocks drift, and an apiserver a few seconds
# behind the machine that ran `gpugate certs` would otherwise reject a brand-new certificate.
CLOCK_SKEW = dt.timedelta(minutes=5)
DEFAULT_DAYS = 365

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
BUNDLE_FILE = "ca-bundle.b64"

# RFC 1123 label; a DNS name is dot-separated labels, at most 253 characters. `*.` is allowed
# as the first label for wildcard SANs.
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class CertificateError(ValueError):
    """Input a person has to fix (a bad host name, a bad validity period)."""


@dataclass(frozen=True)
class Issued:
    """A certificate with its private key."""

    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def private_key_pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def service_hosts(service: str, *, namespace: str) -> list[str]:
    """The names a Service is reached by inside the cluster; the apiserver uses `<svc>.<ns>.svc`."""
    for what, value in (("service", service), ("namespace", namespace)):
        if not _LABEL.match(value):
            raise CertificateError(
                f"{what} {value!r} is not a valid Kubernetes name "
                "(lowercase letters, digits and '-', at most 63 characters)"
            )
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def subject_alternative_name(host: str) -> x509.GeneralName:
    """An IPAddress SAN for an IP literal, a DNSName SAN for a valid DNS name; else CertificateError."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    name = host.lower()
    labels = name.split(".")
    if labels[0] == "*" and len(labels) > 1:
        labels = labels[1:]
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise CertificateError(
            f"host {host!r} is neither an IP address nor a DNS name "
            "(dot-separated labels of lowercase letters, digits and '-')"
        )
    return x509.DNSName(name)


def _validity(now: dt.datetime, valid_for: dt.timedelta) -> tuple[dt.datetime, dt.datetime]:
    if valid_for <= dt.timedelta(0):
        raise CertificateError("the validity period must be positive")
    if now.tzinfo is None:
        raise CertificateError("now must be timezone-aware")
    return now - CLOCK_SKEW, now + valid_for


def build_ca(*, common_name: str, now: dt.datetime, valid_for: dt.timedelta) -> Issued:
    """A self-signed CA that may sign server certificates only (pathlen 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(now, valid_for)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    public_key = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(certificate, key)


def build_serving_certificate(ca: Issued, hosts: Sequence[str], *, now: dt.datetime, valid_for: dt.timedelta) -> Issued:
    """A serverAuth certificate for `hosts` (DNS names and IP addresses), signed by `ca`."""
    if not hosts:
        raise CertificateError("a serving certificate needs at least one host")
    names = list(dict.fromkeys(subject_alternative_name(host) for host in hosts))
    not_before, not_after = _validity(now, valid_for)
    # A leaf that outlives its CA is rejected by verifiers; clamp instead of surprising later.
    not_after = min(not_after, ca.certificate.not_valid_after_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    public_key = key.public_key()
    ca_ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])]))
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca.private_key, hashes.SHA256())
    )
    return Issued(certificate, key)


def ca_bundle(ca_pem: bytes) -> str:
    """What goes into a webhook's `clientConfig.caBundle`: base64 of the PEM, on one line."""
    return base64.b64encode(ca_pem).decode("ascii")


def write_files(directory: Path, files: dict[str, tuple[bytes, int]], *, force: bool) -> list[Path]:
    """Write each name -> (content, mode) atomically (temp file, fsync, rename).

    Refuses before writing anything if a target exists and `force` is false, so a second run
    never leaves a half-replaced set. Raises OSError or FileExistsError.
    """
    directory.mkdir(parents=True, exist_ok=True)
    targets = {name: directory / name for name in files}
    existing = [str(path) for path in targets.values() if path.exists() or path.is_symlink()]
    if existing and not force:
        raise FileExistsError(f"refusing to overwrite {', '.join(existing)} (use --force to replace them)")
    staged: list[tuple[str, Path]] = []
    try:
        for name, (content, mode) in files.items():
            fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
            staged.append((temp, targets[name]))
            try:
                os.fchmod(fd, mode)
                os.write(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
        # The private key first: a server watching the directory sees a new key before the new
        # certificate, and retries until both match (see webhook.serve.tls).
        for temp, target in staged:
            os.replace(temp, target)
    finally:
        for temp, _ in staged:
            if os.path.exists(temp):
                os.unlink(temp)
    return list(targets.values())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gpugate certs`."""
    parser.add_argument("--service", required=True, metavar="NAME", help="Service name of the webhook")
    parser.add_argument("--namespace", required=True, metavar="NS", help="namespace of that Service")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory to write the files to")
    parser.add_argument(
        "--host", action="append", default=[], metavar="H", help="extra SAN: a DNS name or an IP address (repeatable)"
    )
    parser.add_argument(
        "--days",
        type=int,
        default=DEFAULT_DAYS,
        metavar="N",
        help=f"validity of the CA and the certificate in days (default {DEFAULT_DAYS})",
    )
    parser.add_argument("--force", action="store_true", help="replace existing files in DIR")


def run(args: argparse.Namespace, *, now: dt.datetime | None = None) -> int:
    """`gpugate certs`: write ca.crt, tls.crt, tls.key (0600) and ca-bundle.b64; print the caBundle."""
    now = now or dt.datetime.now(dt.UTC)
    try:
        if not 1 <= args.days <= 3650:
            raise CertificateError(f"--days must be between 1 and 3650, not {args.days}")
        hosts = [*service_hosts(args.service, namespace=args.namespace), *args.host]
        valid_for = dt.timedelta(days=args.days)
        ca = build_ca(common_name=f"gpugate CA for {args.service}.{args.namespace}.svc", now=now, valid_for=valid_for)
        serving = build_serving_certificate(ca, hosts, now=now, valid_for=valid_for)
        ca_pem = ca.certificate_pem()
        bundle = ca_bundle(ca_pem)
        paths = write_files(
            Path(args.out),
            {
                KEY_FILE: (serving.private_key_pem(), 0o600),
                CERT_FILE: (serving.certificate_pem(), 0o644),
                CA_FILE: (ca_pem, 0o644),
                BUNDLE_FILE: (bundle.encode("ascii") + b"\n", 0o644),
            },
            force=args.force,
        )
    except CertificateError as err:
        print(f"gpugate certs: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except FileExistsError as err:
        print(f"gpugate certs: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        print(f"gpugate certs: cannot write to {err.filename or args.out}: {err.strerror or err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    not_after = serving.certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"caBundle: {bundle}")
    for path in paths:
        print(f"wrote {path}")
    print(f"serving certificate valid until {not_after} for: {', '.join(dict.fromkeys(hosts))}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpugate certs", description=run.__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
