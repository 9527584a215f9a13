"""``gpugate serve``: the admission webhook. gunicorn over TLS (``command``, ``gunicorn``, ``worker``, ``tls``),
the flask routes (``app``) and their wiring in each worker (``wiring``), the AdmissionReview wire format
(``review``), the Prometheus metrics (``metrics``) and what /metrics and /readyz report (``status``), and the
server's live state: the policy set in force (``policies``), its last good copy (``lastgood``) and the file
follower under both and the certificate (``reloading``)."""
