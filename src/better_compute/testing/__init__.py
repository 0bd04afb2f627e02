"""The simulated world: emulators of GKE, EKS, DOKS and the Kubernetes API, and the conformance kit.

Product code never imports this package (import-linter holds that).
"""
