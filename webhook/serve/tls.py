"""Server-side TLS for gpugate: a hardened SSLContext and a certificate that reloads when its files change."""

from __future__ import annotations

import datetime as dt
import errno
import logging
import os
import ssl
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from cryptography import x509

from .reloading import Follower

log = logging.getLogger("gpugate.tls")

# TLS 1.2 suites with forward secrecy and AEAD only (what Go's crypto/tls, and so kube-apiserver,
# prefers); TLS 1.3 suites are OpenSSL's defaults, which are all modern.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# The apiserver offers only http/1.1 (docs/admission-contract.md §1); gunicorn serves HTTP/1.1.
ALPN = ["http/1.1"]
# Kubernetes swaps a Secret volume's `..data` symlink; look at the files at most this often.
CHECK_INTERVAL = 1.0


# gunicorn's gthread worker reads a request in one of its few threads, with blocking reads and no timeout
# (it waits for a connection's first bytes in its poller, but not for the rest of the handshake or the
# request), so a handful of clients that send a header line now and then (slowloris), or that finish the
# TLS handshake and then say nothing, would hold every thread for good. Hence: a client gets
# HANDSHAKE_TIMEOUT for the TLS handshake, REQUEST_READ_TIMEOUT for each request, and never more than
# IDLE_TIMEOUT of silence within either. kube-apiserver sends a review in one go right after connecting
# (or on a kept-alive connection, which waits in gunicorn's poller, not in a thread) and gives up on it
# after the webhook's timeoutSeconds (at most 30 s, 5 s in deploy/). gpugate's worker (webhook/serve/worker.py)
# performs the handshake and gathers each request without blocking, waiting for the client's bytes in the
# poller: there the handshake gets HANDSHAKE_TIMEOUT, a request REQUEST_READ_TIMEOUT from its first byte and
# IDLE_TIMEOUT between bytes, and a thread reads only requests that have arrived whole.
HANDSHAKE_TIMEOUT = 5.0
REQUEST_READ_TIMEOUT = 10.0
IDLE_TIMEOUT = 3.0


@dataclass(frozen=True)
class Timeouts:
    """Seconds a client gets for the TLS handshake, for each request, and of silence within either
    (`gpugate serve --handshake-timeout/--request-timeout/--idle-timeout`)."""

    handshake: float = HANDSHAKE_TIMEOUT
    request: float = REQUEST_READ_TIMEOUT
    idle: float = IDLE_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("handshake", "request", "idle"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"--{name}-timeout must be a positive number of seconds, got {value}")


class TLSConfigError(Exception):
    """The certificate or key cannot be used; the message names the file and the reason."""


@dataclass(frozen=True)
class Loaded:
    """One loaded certificate/key pair, ready to hand to new connections."""

    context: ssl.SSLContext
    certificate: x509.Certificate
    signature: tuple[tuple[int, int, int, int], ...]


def _signature(*paths: str) -> tuple[tuple[int, int, int, int], ...]:
    # stat() follows symlinks, so this describes the files `..data` currently points to.
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    raise _EncryptedKey


class DeadlineSocket(ssl.SSLSocket):
    """A server-side TLS socket whose handshake and each request must arrive within its `timeouts`.

    gunicorn switches a connection to blocking mode when a thread starts reading a request from it, and
    back to non-blocking while it idles between requests: switching to blocking starts the clock.
    """

    timeouts: ClassVar[Timeouts] = Timeouts()
    _deadline: float | None = None
    # Set by gpugate's worker once the handshake is done: each request is gathered in the poller before a thread
    # reads it (webhook/serve/worker.py), so a thread's read never waits for the client. What it reads past the
    # gathered bytes (the rest of a body over the limit, which the poller already dropped) is not there: such a
    # read fails at once, as a reset, instead of holding the thread until the timeouts.
    from_buffer: bool = False

    def setblocking(self, flag: bool) -> None:
        super().setblocking(flag)
        if flag:
            self._deadline = time.monotonic() + self.timeouts.request

    def do_handshake(self, block: bool = False) -> None:
        if self.gettimeout() != 0.0:  # blocking: the handshake is a read like any other
            self._deadline = time.monotonic() + self.timeouts.handshake
            self._arm()
        try:
            super().do_handshake(block)
        except TimeoutError:
            raise self._too_slow("the TLS handshake") from None

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # ssl.SSLSocket.read's own names
        if self.from_buffer and self.gettimeout() != 0.0:  # a pool thread's read: never wait
            self.settimeout(0.0)
            try:
                return super().read(len, buffer)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                raise ConnectionResetError(errno.ECONNRESET, "nothing more of the request has arrived") from None
            finally:  # writing the answer gets the whole timeout
                self.settimeout(self.timeouts.request)
        armed = self._deadline is not None and self.gettimeout() != 0.0
        if armed:
            self._arm()
        try:
            return super().read(len, buffer)
        except TimeoutError:
            raise self._too_slow("the request") from None
        finally:
            if armed:  # writing the answer gets the whole timeout, not what the last read left over
                self.settimeout(self.timeouts.request)

    def _arm(self) -> None:
        assert self._deadline is not None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise self._too_slow("the request")
        self.settimeout(min(left, self.timeouts.idle))

    def _too_slow(self, what: str) -> ConnectionResetError:
        # ECONNRESET: gunicorn closes such a connection quietly instead of logging a traceback for each one.
        try:
            host, port = self.getpeername()[:2]
            peer = f"{host}:{port}"
        except (OSError, TypeError):
            peer = "a client"
        log.warning("closed the connection from %s: %s did not arrive in time", peer, what)
        return ConnectionResetError(errno.ECONNRESET, f"{what} did not arrive in time")


def deadline_socket(timeouts: Timeouts) -> type[DeadlineSocket]:
    """The socket class that enforces `timeouts`."""
    if timeouts == DeadlineSocket.timeouts:
        return DeadlineSocket
    return type("DeadlineSocket", (DeadlineSocket,), {"timeouts": timeouts})


def server_context(
    cert_file: str, key_file: str, *, timeouts: Timeouts = Timeouts()
) -> tuple[ssl.SSLContext, x509.Certificate]:
    """A server SSLContext: TLS 1.2+, forward-secret AEAD ciphers, ALPN http/1.1, no client certs, and
    sockets that close on clients slower than `timeouts`."""
    try:
        with open(cert_file, "rb") as handle:
            pem = handle.read()
    except OSError as err:
        raise TLSConfigError(f"cannot read certificate {cert_file}: {err.strerror or err}") from None
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise TLSConfigError(f"{cert_file} does not hold a PEM certificate") from None
    if not os.access(key_file, os.R_OK):
        raise TLSConfigError(f"cannot read private key {key_file}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.sslsocket_class = deadline_socket(timeouts)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    context.set_ciphers(CIPHERS)
    context.set_alpn_protocols(ALPN)
    context.verify_mode = ssl.CERT_NONE
    try:
        # With no password callback OpenSSL would prompt on the terminal for an encrypted key.
        context.load_cert_chain(cert_file, key_file, password=_no_password)
    except _EncryptedKey:
        raise TLSConfigError(f"{key_file} is encrypted; gpugate needs an unencrypted private key") from None
    except ssl.SSLError as err:
        reason = err.reason or str(err)
        if "KEY_VALUES_MISMATCH" in reason.upper():
            reason = "the private key does not belong to the certificate"
        raise TLSConfigError(f"cannot use {cert_file} with {key_file}: {reason}") from None
    except OSError as err:
        raise TLSConfigError(f"cannot load {cert_file} / {key_file}: {err.strerror or err}") from None
    return context, certificate


def describe(certificate: x509.Certificate) -> str:
    """Serial, expiry and names of a certificate, for logs."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san]
    except x509.ExtensionNotFound:
        names = []
    not_after = certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"serial={certificate.serial_number:x} not_after={not_after} names={','.join(names)}"


class ReloadingCertificate:
    """The current certificate of a server; new handshakes pick up changed files within a second.

    Two paths lead to the new certificate, so that both work whatever the caller caches:
    `context()` returns the current SSLContext (gunicorn ≥ 21 asks its `ssl_context` hook for a
    context on every accepted connection), and every context's `sni_callback` moves the
    handshaking socket to the current context (OpenSSL calls it for every ClientHello, also
    without SNI, so clients connecting by IP are covered too). Connections already established
    keep the certificate they were set up with. Broken new files are logged and skipped: the
    previous certificate stays in service, and the files are retried when they change again
    (``webhook.serve.reloading`` follows them).
    """

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        interval: float = CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        timeouts: Timeouts = Timeouts(),
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.timeouts = timeouts
        current = self._load()  # raises TLSConfigError: refuse to start without a certificate
        self._files = Follower(
            current,
            version=current.signature,
            fingerprint=lambda: _signature(self.cert_file, self.key_file),
            load=self._load,
            errors=(TLSConfigError,),
            interval=interval,
            clock=clock,
            loaded=self._reloaded,
            failed=self._report,
            log=log,
            name="gpugate-certificate-reload",
        )

    def _load(self) -> Loaded:
        try:
            before = _signature(self.cert_file, self.key_file)
        except OSError as err:
            raise TLSConfigError(f"cannot read {err.filename}: {err.strerror or err}") from None
        context, certificate = server_context(self.cert_file, self.key_file, timeouts=self.timeouts)
        context.sni_callback = self._on_client_hello
        return Loaded(context, certificate, before)

    def context(self) -> ssl.SSLContext:
        """The SSLContext for a new connection, reloaded first if the files changed (one thread reloads;
        the others keep handshaking with the current context)."""
        return self._files.current().context

    def certificate(self) -> x509.Certificate:
        return self._files.value.certificate

    def ready(self) -> bool:
        """True while the certificate in service is within its validity period."""
        self.context()
        certificate = self._files.value.certificate
        now = dt.datetime.now(dt.UTC)
        return certificate.not_valid_before_utc <= now < certificate.not_valid_after_utc

    def _reloaded(self, previous: Loaded, loaded: Loaded) -> None:
        log.info("TLS certificate reloaded: %s", describe(loaded.certificate))

    def _report(self, version: Hashable, error: Exception) -> None:
        reason = (
            f"cannot stat {error.filename}: {error.strerror or error}" if isinstance(error, OSError) else str(error)
        )
        log.error("TLS certificate reload failed, still serving %s: %s", describe(self.certificate()), reason)

    def _on_client_hello(
        self, sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        current = self.context()
        if sock.context is not current:
            sock.context = current
