"""GPU policies: the model (``model``, ``labels``, ``keys``), reading policy documents (``reader``, ``loader``,
``legacy`` for the deprecated forms) and directories (``files``), the set in force (``store``), the last good
copy (``lastgood``), the JSON Schema (``schema``) and ``gpugate policy`` (``command``)."""
