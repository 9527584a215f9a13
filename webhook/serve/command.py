"""`gpugate serve`: its flags, the checks that run before any worker starts, then gunicorn (see ``gunicorn``)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gunicorn.workers import gthread

from ..policy.loader import PolicyError
from ..policy.model import PolicySet
from ..terminal import EXIT_BAD_INPUT, EXIT_OK
from . import lastgood
from .gunicorn import FIRST_BYTES_TIMEOUT, Server, gunicorn_options
from .tls import (
    HANDSHAKE_TIMEOUT,
    IDLE_TIMEOUT,
    REQUEST_READ_TIMEOUT,
    ReloadingCertificate,
    Timeouts,
    TLSConfigError,
    describe,
)
from .worker import DEFAULT_MAX_PARKED

APP_FACTORY = "webhook.serve.wiring:build_app"
#: How `--native-sync` reaches the workers (they are forked with the master's environment).
NATIVE_SYNC_VARIABLE = "GPUGATE_NATIVE_SYNC"
DEFAULT_BIND = "0.0.0.0:8443"
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 4
log = logging.getLogger("gpugate.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gpugate serve`."""
    parser.add_argument("--policies", required=True, metavar="DIR", help="directory of policy YAML files")
    parser.add_argument("--cert", required=True, metavar="FILE", help="PEM serving certificate (chain)")
    parser.add_argument("--key", required=True, metavar="FILE", help="PEM private key of --cert")
    parser.add_argument(
        "--bind", default=DEFAULT_BIND, metavar="HOST:PORT", help=f"address to listen on (default {DEFAULT_BIND})"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        metavar="N",
        help=f"worker processes (default {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        metavar="N",
        help=f"threads per worker (default {DEFAULT_THREADS})",
    )
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig for reading namespace labels (default: in-cluster config)"
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level (default info)"
    )
    parser.add_argument("--access-log", action="store_true", help="log every request to stdout")
    # Slow or silent clients are cut off (webhook/serve/tls.py): kube-apiserver sends a review at once.
    for name, default, what in (
        ("handshake", HANDSHAKE_TIMEOUT, "time a client gets for the TLS handshake"),
        ("request", REQUEST_READ_TIMEOUT, "time a client gets to send each request"),
        ("idle", IDLE_TIMEOUT, "longest silence within a request"),
    ):
        parser.add_argument(
            f"--{name}-timeout",
            type=float,
            default=default,
            metavar="SECONDS",
            help=f"{what}; a slower client is disconnected (default {default:g})",
        )
    parser.add_argument(
        "--max-parked-connections",
        type=int,
        default=DEFAULT_MAX_PARKED,
        metavar="N",
        help="connections per worker that may wait without a request (holding no thread); one more closes "
        f"the one that has waited longest (default {DEFAULT_MAX_PARKED}: four apiservers' idle pools)",
    )
    parser.add_argument(
        "--native-sync",
        metavar="WEBHOOK_CONFIGURATION",
        nargs="?",
        const="gpugate",
        default=None,
        help="keep the native tier (Kubernetes 1.36+) in step with the policies: apply what `gpugate policy "
        "compile` prints by server-side apply, one replica at a time (a Lease), and narrow the webhooks of "
        "WEBHOOK_CONFIGURATION (default gpugate); needs deploy/components/native-sync's RBAC. Off by default",
    )
    # The same stack with another WSGI app: how the benchmark measures a no-op endpoint.
    parser.add_argument(
        "--app-factory",
        default=APP_FACTORY,
        metavar="MODULE:CALLABLE",
        help="WSGI app factory, called as f(policies_dir, kubeconfig=, tls_ready=) "
        f"in every worker (default {APP_FACTORY}; for benchmarks and tests)",
    )


def parse_bind(bind: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); ValueError with a readable message."""
    host, sep, port = bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--bind {bind!r} is not HOST:PORT (e.g. 0.0.0.0:8443 or [::]:8443)")
    return host.strip("[]"), int(port)


def check_bind_free(bind: str) -> None:
    """Bind the address once before gunicorn does, so that a busy port stops `serve` with one line.

    gunicorn itself retries a busy address five times, a second apart, logging each attempt, and
    then exits 1 (gunicorn/sock.py create_sockets). SO_REUSEADDR as gunicorn sets it, so a port
    left in TIME_WAIT by a previous run is not reported busy.
    """
    host, port = parse_bind(bind)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise ValueError(f"--bind {bind}: cannot resolve {host!r}: {err}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            raise ValueError(
                f"--bind {bind}: {err.strerror or err} (another process listens there? stop it or pick another --bind)"
            ) from None


def check_factory(spec: str) -> str:
    """Check that `MODULE:CALLABLE` names an importable module, without importing it.

    The module is imported in each worker after fork (`Server.load`): importing it here would
    import prometheus_client into the master too, whose metric files (a 0 for every gauge) would
    then be summed into every scrape as if the master were a worker.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--app-factory {spec!r} is not MODULE:CALLABLE")
    if importlib.util.find_spec(module_name) is None:
        raise ValueError(f"--app-factory {spec!r}: no module {module_name}")
    return spec


def check_policies(policies: str, *, required: bool, run_directory: str | None) -> None:
    """Load the policies once before forking, so a broken directory stops the server with a message, unless
    ``run_directory`` (where this server run keeps its metrics) holds a last good copy that loads."""
    if not os.path.isdir(policies):
        raise ValueError(f"--policies {policies}: not a directory")
    try:
        policy = importlib.import_module("webhook.policy.files")
    except ImportError:
        if required:
            raise
        return
    try:
        policy.load_policies(policies)
    except policy.PolicyError as err:
        issues = err.issues
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        first = f"{issues[0]}{more}" if issues else str(err)
        good = _last_good_copy(run_directory)
        if good is None:
            raise ValueError(
                f"--policies {policies}: invalid: {first}; no last good copy to start from "
                f"(gpugate policy validate {policies} lists every error)"
            ) from None
        print(
            f"gpugate serve: warning: --policies {policies}: invalid: {first}; "
            f"starting from the last good copy ({good.digest})",
            file=sys.stderr,
        )


def _last_good_copy(run_directory: str | None) -> PolicySet | None:
    """The copy a previous run of this server kept in its metrics directory (an emptyDir outlives a
    container restart), if there is one that loads."""
    if run_directory is None:
        return None
    try:
        return lastgood.load(from_=Path(run_directory))
    except (PolicyError, OSError):
        return None


def prepare_metrics_dir() -> str | None:
    """Point prometheus_client at a multiprocess directory before any worker exists.

    Returns the directory when gpugate created it (and so removes it on exit). Must run before
    prometheus_client is imported: it picks its value class from the environment at import.
    """
    existing = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if existing:
        os.makedirs(existing, exist_ok=True)
        # prometheus_client: "This directory should be wiped between Gunicorn runs".
        # The last good policy copy stays (webhook/serve/lastgood.py): a server restarted over broken
        # files starts from it. Older copies and staging directories go.
        link = os.path.join(existing, lastgood.LINK)
        kept = os.readlink(link) if os.path.islink(link) else None
        for name in os.listdir(existing):
            path = os.path.join(existing, name)
            if name.endswith(".db") or name.startswith("claim-"):  # claim-*: webhook.serve.metrics.claim
                os.unlink(path)
            elif name.startswith(lastgood.OWN_PREFIXES) and name != kept:
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
        return None
    created = tempfile.mkdtemp(prefix="gpugate-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = created
    return created


def run(args: argparse.Namespace) -> int:
    """`gpugate serve`: validate policies, certificate and options, then run gunicorn."""
    metrics_dir: str | None = None
    try:
        if args.workers < 1 or args.threads < 1:
            raise ValueError("--workers and --threads must be at least 1")
        if args.max_parked_connections < 1:
            raise ValueError(f"--max-parked-connections must be at least 1, got {args.max_parked_connections}")
        check_bind_free(args.bind)
        metrics_dir = prepare_metrics_dir()
        check_policies(
            args.policies,
            required=args.app_factory == APP_FACTORY,
            run_directory=os.environ.get("PROMETHEUS_MULTIPROC_DIR"),  # set by prepare_metrics_dir
        )
        timeouts = Timeouts(args.handshake_timeout, args.request_timeout, args.idle_timeout)
        certificate = ReloadingCertificate(args.cert, args.key, timeouts=timeouts)
        factory = check_factory(args.app_factory)
    except (ValueError, TLSConfigError, ImportError, OSError) as err:
        print(f"gpugate serve: {err}", file=sys.stderr)
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        return EXIT_BAD_INPUT
    if not certificate.ready():
        print(
            f"gpugate serve: warning: the certificate is outside its validity period "
            f"({describe(certificate.certificate())}); /readyz reports not ready",
            file=sys.stderr,
        )
    if args.native_sync:
        os.environ[NATIVE_SYNC_VARIABLE] = args.native_sync  # read by every worker (wiring.build_app)
    options = gunicorn_options(args, certificate=certificate, metrics_dir=metrics_dir)
    server = Server(
        options, factory=factory, policies=args.policies, kubeconfig=args.kubeconfig, certificate=certificate
    )
    if hasattr(gthread, "DEFAULT_WORKER_DATA_TIMEOUT"):  # read at call time; workers inherit it on fork
        gthread.DEFAULT_WORKER_DATA_TIMEOUT = FIRST_BYTES_TIMEOUT
    try:
        server.run()
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1  # gunicorn's own code, as it exits
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpugate serve", description=run.__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
