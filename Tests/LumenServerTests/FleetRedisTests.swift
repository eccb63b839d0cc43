import Foundation
import Lumen
@testable import LumenServer
import LumenTestSupport
import Testing

/// Nodes sharing work through a real redis-server (started here, on loopback, no persistence).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FleetRedisTests {
    /// Three nodes in front of one origin, all on `redis`.
    private static func fleet(_ redis: RedisProcess, origin: LoopbackServer, count: Int = 3,
                              logs: LogLines? = nil, redisTimeout: Double = 0.5) throws -> [ServerFixture] {
        try (0..<count).map { index in
            try ServerFixture(origin: origin) { c in
                c.redis = try! RedisAddress(redis.url)
                c.redisTimeout = redisTimeout
                if index == 0, let logs { c.logger = { line in logs.append(line) } }
            }
        }
    }

    @Test func sixtyRequestsAcrossThreeNodesMakeOneOriginFetch() async throws {
        let redis = try RedisProcess()
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let nodes = try Self.fleet(redis, origin: origin)
        nodes[0].serveJPEG("/new.jpg", width: 800, height: 600)
        origin.hold("/new.jpg")
        let sizes = ["w:64", "w:128,h:128", "w:200,fit:cover,h:100"]
        let responses = try await withThrowingTaskGroup(of: RawResponse.self) { group in
            for i in 0..<60 {
                let node = nodes[i % 3]
                let path = node.path(sizes[(i / 3) % 3], "/new.jpg")
                group.addTask { try await node.get(path) }
            }
            // One node fetches; the other two wait on its lock in Redis.
            await eventually("60 requests wait, one fetch started") {
                nodes.map { $0.server.metrics.queued }.reduce(0, +) == 60 && origin.requestCount(for: "/new.jpg") >= 1
                    && nodes.map { $0.server.metrics.redis.lockWaits }.reduce(0, +) >= 2
            }
            origin.release("/new.jpg")
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(responses.allSatisfy { $0.status == 200 }, "\(responses.map(\.status))")
        #expect(origin.requestCount(for: "/new.jpg") == 1)
        #expect(nodes.map { $0.server.metrics.originFetches }.reduce(0, +) == 1)
        #expect(nodes.map { $0.server.metrics.redis.hits["original", default: 0] }.reduce(0, +) == 2)
        // Every node answers one size with the same bytes.
        let bySize = Dictionary(grouping: responses, by: { $0.header("ETag") ?? "" })
        #expect(bySize.count == 3)
        // A node that read the bytes from Redis says so in /metrics.
        let reader = try #require(nodes.first { $0.server.metrics.originFetches == 0 })
        let text = String(decoding: try await reader.get("/metrics").body, as: UTF8.self)
        #expect(text.contains("lumen_redis_up 1\n"))
        #expect(text.contains("lumen_origin_fetches_total 0\n"))
        #expect(text.contains("lumen_redis_hits_total{kind=\"original\"} 1\n"))
    }

    /// A value damaged in Redis (one byte flipped, or cut short) is a miss: the node fetches
    /// and encodes again and answers the right image, and removes the damaged value.
    @Test(arguments: ["flip", "truncate"])
    func aDamagedValueIsAMissAndTheImageIsRight(damage: String) async throws {
        let redis = try RedisProcess()
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let nodes = try Self.fleet(redis, origin: origin, count: 2)
        nodes[0].serveJPEG("/d.jpg", width: 400, height: 300)
        let first = try await nodes[0].get(nodes[0].path("w:100", "/d.jpg"))
        #expect(first.status == 200)
        let client = RedisClient(address: try RedisAddress(redis.url)) { _, _ in }
        defer { client.close() }
        guard case .array(let keys)? = await client.command("KEYS", "lumen:v1:*") else {
            Issue.record("no keys")
            return
        }
        #expect(keys.count == 2) // the original and the result
        for case .string(let key) in keys {
            guard case .string(var value)? = await client.command([Data("GET".utf8), key]) else { continue }
            if damage == "flip" { value[value.count - 10] ^= 0x01 } else { value = value.prefix(value.count / 2) }
            #expect(await client.command([Data("SET".utf8), key, value]) == .status("OK"))
        }
        let second = try await nodes[1].get(nodes[1].path("w:100", "/d.jpg"))
        #expect(second.status == 200)
        #expect(second.body == first.body)
        #expect(nodes[1].server.metrics.redis.damaged >= 1)
        #expect(origin.requestCount(for: "/d.jpg") == 2)
        // Stored again, intact: a third node reads both from Redis.
        let third = try ServerFixture(origin: origin) { c in c.redis = try! RedisAddress(redis.url) }
        let answer = try await third.get(third.path("w:100", "/d.jpg"))
        #expect(answer.body == first.body)
        #expect(third.server.metrics.redis.hits["result"] == 1)
        #expect(origin.requestCount(for: "/d.jpg") == 2)
    }

    /// Redis stopped mid-run: every request is still answered (from the node's own caches and
    /// the origin), logged once; Redis back: the nodes reconnect and share again.
    @Test func redisDownLosesNoRequestAndSharingResumesWhenItIsBack() async throws {
        let redis = try RedisProcess()
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let logs = LogLines()
        let nodes = try Self.fleet(redis, origin: origin, count: 2, logs: logs)
        for name in ["a", "b", "c", "d"] { nodes[0].serveJPEG("/\(name).jpg", width: 320, height: 240) }
        #expect(try await nodes[0].get(nodes[0].path("w:50", "/a.jpg")).status == 200)
        #expect(try await nodes[1].get(nodes[1].path("w:50", "/a.jpg")).status == 200)
        #expect(origin.requestCount(for: "/a.jpg") == 1)
        #expect(nodes[1].server.metrics.redis.hits["result"] == 1) // node 0's result for /a.jpg

        redis.stop()
        var statuses: [Int] = []
        for name in ["b", "c"] {
            for node in nodes {
                for width in [40, 60] { statuses.append(try await node.get(node.path("w:\(width)", "/\(name).jpg")).status) }
            }
        }
        #expect(statuses == Array(repeating: 200, count: statuses.count))
        #expect(nodes.allSatisfy { !$0.server.metrics.redis.isUp })
        #expect(logs.count { $0.contains("unreachable") } == 1)

        try redis.start()
        await eventually("both nodes reconnect") { nodes.allSatisfy { $0.server.metrics.redis.isUp } }
        #expect(try await nodes[0].get(nodes[0].path("w:50", "/d.jpg")).status == 200)
        #expect(try await nodes[1].get(nodes[1].path("w:50", "/d.jpg")).status == 200)
        #expect(origin.requestCount(for: "/d.jpg") == 1)
        #expect(nodes[1].server.metrics.redis.hits["result"] == 2) // and node 0's for /d.jpg
        #expect(logs.count { $0.contains("connected") } == 2) // at start, and back
    }

    /// Redis slow rather than down: the process is frozen (SIGSTOP), so connections are
    /// accepted and commands never answered. Every request is answered while it stays frozen
    /// (the test thaws it only after the answers, so a node that waited on Redis would hang
    /// here), the nodes mark it unreachable once, and share again once it answers.
    @Test func aSlowRedisFailsNoRequestAndSharingResumesWhenItAnswers() async throws {
        let redis = try RedisProcess()
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let logs = LogLines()
        let nodes = try Self.fleet(redis, origin: origin, count: 2, logs: logs, redisTimeout: 0.2)
        for name in ["s1", "s2", "s3", "s4"] { nodes[0].serveJPEG("/\(name).jpg", width: 320, height: 240) }
        #expect(try await nodes[0].get(nodes[0].path("w:50", "/s1.jpg")).status == 200)
        #expect(try await nodes[1].get(nodes[1].path("w:50", "/s1.jpg")).status == 200)
        #expect(origin.requestCount(for: "/s1.jpg") == 1)

        redis.freeze()
        var statuses: [Int] = []
        for name in ["s2", "s3"] {
            for node in nodes {
                for width in [40, 60] { statuses.append(try await node.get(node.path("w:\(width)", "/\(name).jpg")).status) }
            }
        }
        // Answered before Redis thaws, each from an origin fetch or the node's own caches.
        #expect(statuses == Array(repeating: 200, count: statuses.count))
        #expect(nodes.allSatisfy { !$0.server.metrics.redis.isUp })
        #expect(logs.count { $0.contains("unreachable") } == 1)

        redis.thaw()
        await eventually("both nodes reconnect") { nodes.allSatisfy { $0.server.metrics.redis.isUp } }
        #expect(try await nodes[0].get(nodes[0].path("w:50", "/s4.jpg")).status == 200)
        #expect(try await nodes[1].get(nodes[1].path("w:50", "/s4.jpg")).status == 200)
        #expect(origin.requestCount(for: "/s4.jpg") == 1)
        #expect(logs.count { $0.contains("connected") } == 2) // at start, and back
    }

    /// Redis full (it refuses writes): requests are answered, the refusal is logged once and
    /// counted, and writes are logged as accepted again once Redis has room.
    @Test func aFullRedisFailsNoRequest() async throws {
        let redis = try RedisProcess()
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let logs = LogLines()
        let nodes = try Self.fleet(redis, origin: origin, count: 1, logs: logs)
        let node = nodes[0]
        let client = RedisClient(address: try RedisAddress(redis.url)) { _, _ in }
        defer { client.close() }
        #expect(await client.command("CONFIG", "SET", "maxmemory", "1") == .status("OK"))
        #expect(await client.command("CONFIG", "SET", "maxmemory-policy", "noeviction") == .status("OK"))
        for name in ["f1", "f2", "f3"] {
            node.serveJPEG("/\(name).jpg", width: 200, height: 100)
            #expect(try await node.get(node.path("w:40", "/\(name).jpg")).status == 200)
        }
        #expect(node.server.metrics.redis.errors >= 3)
        #expect(node.server.metrics.redis.stores == 0)
        #expect(logs.count { $0.contains("refusing writes") } == 1)
        #expect(await client.command("CONFIG", "SET", "maxmemory", "0") == .status("OK"))
        node.serveJPEG("/f4.jpg", width: 200, height: 100)
        #expect(try await node.get(node.path("w:40", "/f4.jpg")).status == 200)
        #expect(node.server.metrics.redis.stores == 2)
        #expect(logs.count { $0.contains("accepting writes again") } == 1)
    }

    /// A node that takes a source's lock and dies delays the others by the lock's lifetime at
    /// most: they then fetch for themselves.
    @Test func aLockLeftByADeadNodeOnlyDelays() async throws {
        let redis = try RedisProcess()
        let origin = try LoopbackServer()
        defer { origin.stop() }
        let node = try ServerFixture(origin: origin) { c in
            c.redis = try! RedisAddress(redis.url)
            c.sourceTimeout = 0.5 // the lock lives 1.5 s
        }
        node.serveJPEG("/l.jpg")
        let source = origin.url(for: "/l.jpg")
        let client = RedisClient(address: try RedisAddress(redis.url)) { _, _ in }
        defer { client.close() }
        let key = SharedStore.key(.original, source.absoluteString)
        // A "dead node's" lock: taken, never released.
        #expect(await client.command("SET", SharedStore.lockKey(key), "dead", "NX", "PX", "1500") == .status("OK"))
        let response = try await node.get(node.path("w:30", "/l.jpg"))
        #expect(response.status == 200)
        #expect(origin.requestCount(for: "/l.jpg") == 1)
        #expect(node.server.metrics.redis.lockWaits == 1)
    }
}

/// The frame around every value in Redis, and the address syntax.
struct SharedStoreFrameTests {
    @Test func everyFlippedByteAndEveryCutIsRefused() {
        let entry = SharedStore.Entry(fields: ["Content-Type": "image/jpeg", "ETag": "\"x\""], payload: Data((0..<200).map { UInt8($0 % 251) }))
        let framed = SharedStore.frame(entry)
        #expect(SharedStore.unframe(framed) == entry)
        for index in framed.indices {
            var damaged = framed
            damaged[index] ^= 0x40
            #expect(SharedStore.unframe(damaged) == nil, "byte \(index)")
        }
        for length in 0..<framed.count {
            #expect(SharedStore.unframe(framed.prefix(length)) == nil, "cut at \(length)")
        }
        #expect(SharedStore.unframe(framed + Data([0])) == nil)
    }

    @Test func keysNameNoSource() {
        let key = SharedStore.key(.original, "https://user:secret@a.example/p.jpg")
        #expect(key.hasPrefix("lumen:v1:original:"))
        #expect(!key.contains("secret") && !key.contains("a.example"))
        #expect(SharedStore.key(.result, "x") != SharedStore.key(.original, "x"))
    }

    @Test func addresses() throws {
        let plain = try RedisAddress("redis://127.0.0.1:6390/2")
        #expect(plain.host == "127.0.0.1" && plain.port == 6390 && plain.database == 2)
        let secret = try RedisAddress("redis://:hunter2@[::1]:6379")
        #expect(secret.host == "::1" && secret.password == "hunter2")
        #expect(!secret.description.contains("hunter2"))
        #expect(try RedisAddress("redis://h").port == 6379)
        for bad in ["http://h:1", "redis://", "redis://h:1/x", "redis://h:0"] {
            #expect(throws: ServerError.self) { try RedisAddress(bad) }
        }
    }
}
