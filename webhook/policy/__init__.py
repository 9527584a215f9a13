"""GPU policies: the model (``model``), reading policy files (``loader``) and the set in force (``store``)."""
