"""The cluster's GPU inventory as pure records: nodes, RuntimeClasses, DeviceClasses, ResourceSlices and claims
reduced to what gpugate reads (``model``), the fleet grouped into GPU pools and compared with the policies
(``pools``), and a fleet read from a snapshot file (``snapshot``).

Never watches or lists anything: the live inventory is kept by ``webhook.kube.inventory``, which builds
these records; the records themselves know no time.
"""
