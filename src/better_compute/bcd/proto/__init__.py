"""The kubelet device plugin API v1beta1: the .proto and the stubs the build generates from it."""
