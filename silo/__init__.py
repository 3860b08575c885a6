"""The silo runtime: membership protocol, gRPC wire, client library, Spark routing, CLI."""
