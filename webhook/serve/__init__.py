"""``gpugate serve``: the admission webhook, and everything of it that lives over time.

Holds gunicorn over TLS (``command``, ``gunicorn``, ``worker``, ``tls``), the flask routes (``app``: routes,
body, answer), their wiring in each worker (``wiring``), the AdmissionReview wire format (``review``), the
Prometheus metrics (``metrics``) and what /metrics and /readyz report (``status``), and the server's live
state: the policy set in force (``policies``), its last good copy (``lastgood``) and the file follower under
both and the certificate (``reloading``). The decision itself is ``webhook.admission``'s: nothing here
judges a pod.
"""
