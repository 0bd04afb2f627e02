"""Kubernetes protobuf messages the emulator accepts as request bodies: the .proto files and the stubs the build generates."""
