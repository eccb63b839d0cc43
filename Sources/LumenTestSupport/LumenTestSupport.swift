import Lumen

/// Test doubles for Lumen and its users: a controllable data loader and a loopback HTTP server.
public enum LumenTestSupport {}
