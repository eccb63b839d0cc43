// LumenTestSupport: test doubles for Lumen and its users — `MockDataLoader` (suspend,
// release, fail and count loads), `LoopbackServer` (an HTTP/1.1 server on 127.0.0.1 with
// fault injection) and helpers for waiting on the pipeline without sleeping.
import Lumen
