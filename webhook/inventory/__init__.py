"""The cluster's GPU inventory (nodes, RuntimeClasses, DeviceClasses, ResourceSlices, claims): pure records."""
