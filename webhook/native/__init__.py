"""The native tier: gpugate's policies as MutatingAdmissionPolicy and ValidatingAdmissionPolicy objects."""
