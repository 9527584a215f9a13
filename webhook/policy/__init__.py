"""GPU policies: the model (``model``, ``classes``, ``labels``, ``keys``, ``vendors``), reading policy documents
(``reader``, ``devices``, ``loader``, ``legacy`` for the deprecated forms) and directories (``documents``,
``files``), the set in force (``store``), the last good copy (``lastgood``), the JSON Schema (``schema``) and
``gpugate policy`` (``command``)."""
