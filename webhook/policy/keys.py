"""gpugate's own names: the apiVersion of its documents, and the labels and annotations it writes on pods."""

from __future__ import annotations

#: The API group of gpugate's documents (GPUPolicy, GPUWorkloadKind) and of the audit's report.
GROUP = "gpugate.io"
#: The current policy format (``spec.devices``); the deprecated ``gpugate.io/v1`` still loads (``policy.legacy``).
API_VERSION = f"{GROUP}/v2"
LEGACY_API_VERSION = f"{GROUP}/v1"
#: The audit's JSON report.
AUDIT_API_VERSION = f"{GROUP}/v1"

#: Which policy mutated a pod, and which of its fields (``rules.base.Touch`` names, comma-separated).
POLICY_ANNOTATION = f"{GROUP}/policy"
MUTATED_ANNOTATION = f"{GROUP}/mutated"
#: The workload that runs a pod, as ``Kind/name`` (an annotation) and as two labels DCGM metrics can carry.
WORKLOAD_ANNOTATION = f"{GROUP}/workload"
WORKLOAD_KIND_LABEL = f"{GROUP}/workload-kind"
WORKLOAD_NAME_LABEL = f"{GROUP}/workload-name"
#: The pod label through which a pod names its GPU model class.
MODEL_LABEL = f"{GROUP}/model"
#: The pod label that names a ResourceClaim the pod names and gpugate could not read when it admitted the pod
#: (``Several`` for more than one, or a name that is not a label value): when such a claim is created, the
#: pods carrying it are found by one label-selected list and the claim is added to what they hold
#: (``admission.claims``). gpugate's: a tenant may not set, change or remove it (``rules.attribution``).
CLAIMS_PENDING_LABEL = f"{GROUP}/claims-pending"
CLAIMS_PENDING_SEVERAL = "Several"
#: The pod label ``gpugate-mutate`` (the native tier's MutatingAdmissionPolicy) gives a pod it formed, and removes
#: from a pod that carries it and is not formed as the native tier forms one. The native tier gives the pod-create
#: webhooks an objectSelector that skips a pod carrying it (no CEL, no conversion of the pod in the apiserver), and
#: ``gpugate-always`` refuses a pod that carries it and is not so formed (``native.compiler.narrow``).
FORMED_BY_LABEL = f"{GROUP}/formed-by"
FORMED_BY_NATIVE = "native-tier"
#: The attribution label the shipped policies and the audit's team tally use.
TEAM_LABEL = f"{GROUP}/team"

#: Annotations gpugate writes for its own bookkeeping: not worth a line in an audit.
BOOKKEEPING_ANNOTATIONS = frozenset({POLICY_ANNOTATION, MUTATED_ANNOTATION, WORKLOAD_ANNOTATION})
