"""GPU policies: the model (``model``), reading policy files (``loader``), the set in force (``store``) and
the last good copy (``lastgood``)."""
