"""Certificates from webhook.certs: names, key usages, validity, files on disk and the command's errors."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook import certs

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
YEAR = dt.timedelta(days=365)


@pytest.fixture(scope="module")
def ca() -> certs.Issued:
    return certs.build_ca(common_name="test CA", now=NOW, valid_for=YEAR)


@pytest.fixture(scope="module")
def serving(ca: certs.Issued) -> certs.Issued:
    hosts = [*certs.service_hosts("gpugate", namespace="gpugate"), "127.0.0.1", "::1", "Localhost"]
    return certs.build_serving_certificate(ca, hosts, now=NOW, valid_for=dt.timedelta(days=30))


def command(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    certs.add_arguments(parser)
    return parser.parse_args(argv)


def test_ca_is_a_p256_ca_limited_to_one_level(ca: certs.Issued) -> None:
    cert = ca.certificate
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert isinstance(key.curve, ec.SECP256R1)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and not usage.digital_signature
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)


def test_serving_certificate_names_every_service_name_and_host(serving: certs.Issued) -> None:
    san = serving.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "gpugate",
        "gpugate.gpugate",
        "gpugate.gpugate.svc",
        "gpugate.gpugate.svc.cluster.local",
        "localhost",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]


def test_serving_certificate_is_for_servers_only(ca: certs.Issued, serving: certs.Issued) -> None:
    cert = serving.certificate
    assert isinstance(cert.public_key().curve, ec.SECP256R1)  # type: ignore[union-attr]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    cert.verify_directly_issued_by(ca.certificate)


def test_validity_follows_the_injected_clock(ca: certs.Issued, serving: certs.Issued) -> None:
    assert serving.certificate.not_valid_before_utc == NOW - certs.CLOCK_SKEW
    assert serving.certificate.not_valid_after_utc == NOW + dt.timedelta(days=30)
    assert ca.certificate.not_valid_after_utc == NOW + YEAR


def test_leaf_never_outlives_its_ca(ca: certs.Issued) -> None:
    leaf = certs.build_serving_certificate(ca, ["gpugate"], now=NOW, valid_for=10 * YEAR)
    assert leaf.certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc


@pytest.mark.parametrize("host", ["", "bad host", "-leading.example", "a..b", "x" * 64, "under_score"])
def test_bad_hosts_are_refused(ca: certs.Issued, host: str) -> None:
    with pytest.raises(certs.CertificateError, match="neither an IP address nor a DNS name"):
        certs.build_serving_certificate(ca, ["gpugate", host], now=NOW, valid_for=YEAR)


def test_bad_service_name_is_refused() -> None:
    with pytest.raises(certs.CertificateError, match="not a valid Kubernetes name"):
        certs.service_hosts("GPU.gate", namespace="gpugate")


def test_command_writes_the_four_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = command(
        ["--service", "gpugate", "--namespace", "ops", "--host", "10.0.0.1", "--out", str(out), "--days", "7"]
    )
    assert certs.run(args, now=NOW) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ca-bundle.b64", "ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    for name in ("ca.crt", "tls.crt", "ca-bundle.b64"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644
    bundle = (out / "ca-bundle.b64").read_text()
    assert bundle.endswith("\n") and "\n" not in bundle.rstrip("\n")
    assert base64.b64decode(bundle) == (out / "ca.crt").read_bytes()
    printed = capsys.readouterr().out
    assert f"caBundle: {bundle.strip()}" in printed
    assert str(out / "tls.key") in printed
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate((out / "ca.crt").read_bytes()))
    assert leaf.not_valid_after_utc == NOW + dt.timedelta(days=7)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpugate.ops.svc" in names.get_values_for_type(x509.DNSName)
    assert not list(out.glob(".*.tmp"))


def test_command_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--service", "gpugate", "--namespace", "gpugate", "--out", str(tmp_path)]
    assert certs.run(command(argv), now=NOW) == 0
    before = (tmp_path / "tls.crt").read_bytes()
    capsys.readouterr()
    assert certs.run(command(argv), now=NOW) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "tls.crt").read_bytes() == before
    assert certs.run(command([*argv, "--force"]), now=NOW) == 0
    assert (tmp_path / "tls.crt").read_bytes() != before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host", "no such host"], "neither an IP address nor a DNS name"),
        (["--days", "0"], "--days must be between 1 and 3650"),
    ],
)
def test_command_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["--service", "gpugate", "--namespace", "gpugate", "--out", str(tmp_path / "o"), *extra]
    assert certs.run(command(argv), now=NOW) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_command_reports_an_unwritable_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    argv = ["--service", "gpugate", "--namespace", "gpugate", "--out", str(blocker / "sub")]
    assert certs.run(command(argv), now=NOW) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpugate certs: cannot write to") and "Traceback" not in err
