"""The workload CRDs a test cluster serves (provenance in tests/fixtures/crds/README.md): the minimal ones of
`workload-crds.yaml` for every kind, then the upstream CRD files of the newer kinds over them, so that the
apiserver checks every manifest of those kinds against the real schema before gpugate sees it. Used by the e2e
suite's fleet stack (tests/e2e/conftest.py) and the scheduled tests (tests/scheduling/placements.py)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from tests.harness.polling import eventually

MINIMAL = Path(__file__).resolve().parents[1] / "fixtures" / "crds" / "workload-crds.yaml"
UPSTREAM = MINIMAL.parent / "upstream"  # gzipped, byte for byte as published


def install(cluster: Any, where: Path) -> None:
    """Apply every CRD to `cluster` (anything with ControlPlane's `kubectl`) and wait until they are Established;
    `where` receives the unpacked upstream files."""
    cluster.kubectl("apply", "--server-side", "-f", str(MINIMAL))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(MINIMAL), timeout=90)
    files = []
    for packed in sorted(UPSTREAM.glob("*.yaml.gz")):
        crd = where / packed.name.removesuffix(".gz")
        crd.write_bytes(gzip.decompress(packed.read_bytes()))
        # --force-conflicts: the same field manager applied the minimal CRD of this name just before.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd), timeout=120)
        files.append(crd)

    def established() -> bool:
        # kubectl wait fails outright on a CRD whose status has no conditions yet, so ask until it answers.
        args = [a for f in files for a in ("-f", str(f))]
        done = cluster.kubectl("wait", "--for=condition=Established", "--timeout=10s", *args, check=False, timeout=60)
        return bool(done.ok)

    if not eventually(established, timeout=90):
        raise RuntimeError("the upstream workload CRDs were not Established within 90s")
