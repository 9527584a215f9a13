"""``gpugate audit``: judge what already runs in a cluster with the same decision the webhook makes
(``command`` reads the cluster, ``evaluation`` judges and tallies it)."""
