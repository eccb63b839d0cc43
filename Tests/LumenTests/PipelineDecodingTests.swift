import Foundation
import Lumen
import LumenTestSupport
import Testing

/// The real decoder inside the pipeline: incomplete bytes never pass for an image.
@Suite(.timeLimit(.minutes(1)))
struct PipelineDecodingTests {
    static func photo(width: Int, height: Int) -> Bitmap {
        Bitmap(width: width, height: height, format: .rgb8) { pixels in
            for i in pixels.indices { pixels[i] = UInt8(truncatingIfNeeded: (i / 3) % width &* 5 &+ (i / 3) / width &* 3) }
        }
    }

    @Test(arguments: [false, true])
    func truncatedBytesFailAsTruncatedInsteadOfSucceeding(progressive: Bool) async throws {
        let jpeg = try Self.photo(width: 320, height: 240).encode(as: .jpeg(quality: 90, progressive: progressive))
        let cut = jpeg.prefix(jpeg.count * 6 / 10)
        let pipeline = ImagePipeline(configuration: ImagePipeline.Configuration(dataLoader: MockDataLoader()))
        let request = ImageRequest(id: "cut-\(progressive)", data: { cut }, thumbnail: .maxPixelSize(128))
        await #expect {
            _ = try await pipeline.image(for: request)
        } throws: { error in
            guard let error = error as? ImagePipeline.Error, error.code == .decodingFailed else { return false }
            return (error.underlyingError as? ImagingError) == .truncated
        }
        // Nothing was cached: the complete bytes under another id decode fine.
        let whole = try await pipeline.image(for: ImageRequest(id: "whole-\(progressive)", data: { jpeg }, thumbnail: .maxPixelSize(128)))
        #expect(whole.image.width == 128 && !whole.isPreview)
    }

    /// The first half of a 512×512 baseline JPEG closed by `FF D9`: a well-formed file whose
    /// scan lacks the lower half (libjpeg fills it with grey and only warns).
    static func halfBaselineClosed() throws -> Data {
        let jpeg = try photo(width: 512, height: 512).encode(as: .jpeg(quality: 90))
        var cut = Data(jpeg.prefix(jpeg.count / 2))
        while cut.last == 0xFF { cut.removeLast() }
        return cut + [0xFF, 0xD9]
    }

    /// A valid 64×64 baseline JPEG whose frame header claims 9000×9000.
    static func claimsNineThousand() throws -> Data {
        var jpeg = try photo(width: 64, height: 64).encode(as: .jpeg(quality: 90))
        let bytes = [UInt8](jpeg)
        let sof = (2..<bytes.count - 1).first { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xC0 }!
        for field in [sof + 5, sof + 7] {
            jpeg[field] = UInt8(9000 >> 8)
            jpeg[field + 1] = UInt8(9000 & 0xFF)
        }
        return jpeg
    }

    /// Over HTTP, at a thumbnail size and at full size: the pipeline fails the request as
    /// `truncated`, caches no image, and a second request fails the same way.
    @Test(arguments: [false, true], [nil, 128] as [Int?])
    func aWellFormedJPEGMissingPixelsFailsOverHTTPAndIsNotCached(claimsNineThousand: Bool, thumbnail: Int?) async throws {
        let server = try LoopbackServer()
        defer { server.stop() }
        let data = claimsNineThousand ? try Self.claimsNineThousand() : try Self.halfBaselineClosed()
        server.serve(path: "/damaged.jpg", data: data, contentType: "image/jpeg")
        let pipeline = ImagePipeline(configuration: ImagePipeline.Configuration(dataLoader: DataLoader()))
        var request = ImageRequest(url: server.url(for: "/damaged.jpg"))
        // 9000×9000 at full size would be a 243 MB bitmap: 1/2 scale instead.
        request.thumbnail = thumbnail.map { .maxPixelSize($0) } ?? (claimsNineThousand ? .maxPixelSize(4500) : nil)
        for _ in 0..<2 {
            await #expect {
                _ = try await pipeline.image(for: request)
            } throws: { error in
                guard let error = error as? ImagePipeline.Error, error.code == .decodingFailed else { return false }
                return (error.underlyingError as? ImagingError) == .truncated
            }
            #expect(!pipeline.cache.containsCachedImage(for: request))
            #expect(pipeline.cache[request] == nil)
        }
        #expect(server.statistics.totalRequests >= 1)
    }
}
