import Foundation
import Synchronization
import Testing
@_spi(Testing) import Lumen
import LumenTestSupport

/// A running decode stops part-way when its last subscriber leaves (the decoder sees
/// ``ImageDecodingContext/isCancelled``), and goes on when another subscriber still waits.
@Suite(.timeLimit(.minutes(1)))
struct PipelineDecodeCancellationTests {
    /// The default decoder behind a gate: each call waits until the test opens it, then
    /// records what it saw and decodes.
    final class GatedDecoder: ImageDecoding, Sendable {
        private let gate = DispatchSemaphore(value: 0)
        private let seen = Mutex<[(cancelled: Bool, error: String?)]>([])

        func open() { gate.signal() }
        var calls: [(cancelled: Bool, error: String?)] { seen.withLock { $0 } }

        func decode(_ data: Data, context: ImageDecodingContext) throws -> ImageContainer {
            gate.wait()
            let cancelled = context.isCancelled
            do {
                let image = try ImageDecoders.Default().decode(data, context: context)
                seen.withLock { $0.append((cancelled, nil)) }
                return image
            } catch {
                seen.withLock { $0.append((cancelled, "\(error)")) }
                throw error
            }
        }
    }

    static func harness() throws -> (PipelineHarness, GatedDecoder, ImageRequest) {
        let decoder = GatedDecoder()
        let h = PipelineHarness { $0.decoder = decoder }
        let photo = Bitmap(width: 800, height: 600, format: .rgb8) { p in
            for i in 0..<p.count { p[i] = UInt8(truncatingIfNeeded: i / 3 % 800 &+ i % 3 &* 60) }
        }
        h.loader.serve(try photo.encode(as: .jpeg(quality: 85)), for: PipelineURLs.a)
        return (h, decoder, ImageRequest(url: PipelineURLs.a, thumbnail: .maxPixelSize(100)))
    }

    @Test func theLastSubscriberLeavingStopsTheRunningDecode() async throws {
        let (h, decoder, request) = try Self.harness()
        let task = h.pipeline.imageTask(with: request)
        await h.pipeline.waitForMetrics { $0.decodes == 1 }
        task.cancel()
        decoder.open()
        await h.pipeline.waitForMetrics { $0.decodesInterrupted == 1 }
        await h.waitUntilIdle()
        #expect(decoder.calls.count == 1)
        #expect(decoder.calls.first?.cancelled == true)
        #expect(decoder.calls.first?.error == "\(ImagingError.cancelled)")
        let error = await errorThrown { try await task.response }
        #expect(ImagePipeline.Error.Code.of(error!) == .cancelled)
        // Nothing half-made is kept or reported as a failure.
        #expect(h.pipeline.cache[request] == nil)
        #expect(h.pipeline.metrics.decode.cancelled == 1)
        #expect(h.pipeline.metrics.decode.failed == 0)
        #expect(h.recorder.counts.failed(.decode) == 0)
    }

    @Test func aDecodeAnotherSubscriberWaitsForRunsToItsEnd() async throws {
        let (h, decoder, request) = try Self.harness()
        let leaving = h.pipeline.imageTask(with: request)
        let staying = h.pipeline.imageTask(with: request)
        await h.pipeline.waitForMetrics { $0.decodes == 1 }
        leaving.cancel()
        decoder.open()
        let image = try await staying.response.image
        #expect(image.width == 100)
        #expect(decoder.calls.count == 1)
        #expect(decoder.calls.first?.cancelled == false)
        #expect(h.pipeline.metrics.decodesInterrupted == 0)
        #expect(h.pipeline.cache[request] != nil)
    }

    /// A later request for the image whose decode was stopped decodes it again, in full.
    @Test func aRequestAfterAStoppedDecodeStartsAFreshOne() async throws {
        let (h, decoder, request) = try Self.harness()
        let first = h.pipeline.imageTask(with: request)
        await h.pipeline.waitForMetrics { $0.decodes == 1 }
        first.cancel()
        decoder.open()
        await h.pipeline.waitForMetrics { $0.decodesInterrupted == 1 }
        decoder.open()
        let image = try await h.pipeline.imageTask(with: request).response.image
        #expect(image.width == 100)
        #expect(decoder.calls.map(\.cancelled) == [true, false])
        #expect(h.pipeline.metrics.decodes == 2)
    }
}
