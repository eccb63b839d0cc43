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
}
