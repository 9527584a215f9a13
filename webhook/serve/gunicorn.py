"""gunicorn configured in code for ``gpugate serve``: the options and why each has its value, JSON log lines,
and the application class that builds the WSGI app in every worker after fork."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import logging
import shutil
import sys
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from .tls import ReloadingCertificate
from .worker import parking_worker

# kube-apiserver keeps idle webhook connections for 90 s (Go's http.Transport IdleConnTimeout,
# docs/admission-contract.md §1). Closing earlier than the client makes it race a request against
# our FIN; a longer keepalive lets the client close first.
KEEPALIVE = 120
# Admission requests carry `?timeout=10s` at most 30 s; a worker silent for longer is stuck.
WORKER_TIMEOUT = 30
# Kubernetes' default terminationGracePeriodSeconds is 30; the Deployment's preStop sleep takes 5.
GRACEFUL_TIMEOUT = 20
# The apiserver's request line is `POST /mutate?timeout=10s HTTP/1.1` with ~6 headers.
LIMIT_REQUEST_LINE = 4094
LIMIT_REQUEST_FIELDS = 32
LIMIT_REQUEST_FIELD_SIZE = 8190

# gunicorn's gthread worker waits in a pool thread for a new connection's first bytes
# (DEFAULT_WORKER_DATA_TIMEOUT, 5 s in gunicorn/workers/gthread.py) before parking a silent connection
# in its poller, so N connections that send nothing would hold every thread for N / threads x 5 s.
# gpugate's TLS connections do not wait at all (webhook.serve.worker); what is left of the setting is the
# bound on draining a request body the app did not read, before the connection is kept alive.
FIRST_BYTES_TIMEOUT = 0.5


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, pid, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class JSONLogger(Logger):  # type: ignore[misc]
    """gunicorn's logger with JSON lines; also gives the application's loggers a JSON handler."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        formatter = JSONFormatter()
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                handler.setFormatter(formatter)
        root = logging.getLogger()
        root.setLevel(self.loglevel)
        if not any(getattr(h, "_gpugate", False) for h in root.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(formatter)
            handler._gpugate = True  # type: ignore[attr-defined]
            root.addHandler(handler)


def load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module_name), attr, None)
    if not callable(factory):
        raise ValueError(f"--app-factory {spec!r}: {module_name} has no callable {attr}")
    return factory  # type: ignore[no-any-return]


def _child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


class Server(BaseApplication):  # type: ignore[misc]
    """gunicorn, configured in code; the WSGI app is built in each worker after fork."""

    def __init__(
        self,
        options: dict[str, Any],
        *,
        factory: str,
        policies: str,
        kubeconfig: str | None,
        certificate: ReloadingCertificate,
    ) -> None:
        self.options = options
        self.factory = factory
        self.policies = policies
        self.kubeconfig = kubeconfig
        self.certificate = certificate
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            if name in self.cfg.settings:  # settings differ between gunicorn releases
                self.cfg.set(name, value)

    def load(self) -> Any:
        build = load_factory(self.factory)  # in the worker, after fork: see check_factory
        return build(self.policies, kubeconfig=self.kubeconfig, tls_ready=self.certificate.ready)


def gunicorn_options(
    args: argparse.Namespace, *, certificate: ReloadingCertificate, metrics_dir: str | None
) -> dict[str, Any]:
    def ssl_context(config: Any, default_factory: Callable[[], Any]) -> Any:
        return certificate.context()

    def on_exit(server: Any) -> None:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)

    return {
        "bind": [args.bind],
        "workers": args.workers,
        # gthread keeps connections alive; sync closes each one after a request, so every
        # admission call would pay a TCP + TLS handshake (6-7x the CPU in review; here a new
        # TLS connection per /healthz cost ~1.0 ms of server CPU against ~0.3 ms kept alive).
        # gthread, minus threads pinned by idle connections, with a bound on them (webhook.serve.worker)
        "worker_class": parking_worker(args.max_parked_connections),
        "threads": args.threads,
        "keepalive": KEEPALIVE,
        "timeout": WORKER_TIMEOUT,
        "graceful_timeout": GRACEFUL_TIMEOUT,
        "limit_request_line": LIMIT_REQUEST_LINE,
        "limit_request_fields": LIMIT_REQUEST_FIELDS,
        "limit_request_field_size": LIMIT_REQUEST_FIELD_SIZE,
        "certfile": certificate.cert_file,
        "keyfile": certificate.key_file,
        "ssl_context": ssl_context,
        "http_protocols": "h1",
        "accesslog": "-" if args.access_log else None,
        "errorlog": "-",
        "loglevel": args.log_level,
        "logger_class": JSONLogger,
        "proc_name": "gpugate",
        "preload_app": False,
        "child_exit": _child_exit,
        "on_exit": on_exit,
        # gunicorn >= 25 opens a control socket under $HOME by default; a read-only root
        # filesystem has no place for it, and nothing here uses it.
        "control_socket_disable": True,
    }
