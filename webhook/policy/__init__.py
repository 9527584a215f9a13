"""The policy language alone: the model (``model``, ``classes``, ``labels``, ``keys``, ``vendors``), reading policy
documents (``reader``, ``devices``, ``loader``, ``legacy`` for the deprecated forms) and directories
(``documents``, ``files``), the JSON Schema (``schema``) and ``gpugate policy`` (``command``).

Never keeps time: no threads, temporary directories or environment (an import contract and
tests/policy/test_package.py say so). The set in force, its last good copy and the file follower are the
server's (``webhook.serve``).
"""
