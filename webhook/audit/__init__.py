"""``gpugate audit``: judge what already runs in a cluster with the decision the webhook makes.

Holds the command (``command``: reads the cluster through ``webhook.kube``), the judgement of one object
(``evaluation``), the sums by verdict, rule, team and kind (``tally``), the table (``render``) and the
PolicyReports it writes (``policyreports``). Never decides differently from the webhook: every object goes
through ``admission.offline``, the path ``gpugate check`` uses too.
"""
