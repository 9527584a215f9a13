"""``gpugate serve``: the admission webhook. gunicorn over TLS (``command``, ``worker``, ``tls``), the flask
routes (``app``), the AdmissionReview wire format (``review``) and the Prometheus metrics (``metrics``)."""
