import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A processing stage: subscribes to the stage below (the previous processor prefix, or the
/// decode) — or starts from that prefix's image when the memory cache had it — then applies one
/// processor on a processing worker thread.
final class ProcessTask: ImageStageTask, @unchecked Sendable { // state guarded by graph.lock
    let keys: RequestKeys
    let processorCount: Int

    /// Whether its input comes from the memory cache: a cached processor prefix, or a decode
    /// made from a memory-cached image (see ``WorkGraph/derivationSource(for:)``).
    private let startsFromMemory: Bool

    init(graph: WorkGraph, request: ImageRequest, keys: RequestKeys, processorCount: Int, isFinal: Bool) {
        self.keys = keys
        self.processorCount = processorCount
        self.startsFromMemory = keys.cachedPrefix != nil || keys.derivationSource != nil
        super.init(graph: graph, request: request, cacheKeys: keys.cache, isFinal: isFinal, stage: .process)
    }

    var key: ProcessKey { keys.process[processorCount - 1] }

    /// Whether a request may join this task: one whose input came from the memory cache answers
    /// only requests that may read it.
    func mayBeJoined(by request: ImageRequest) -> Bool {
        !startsFromMemory || CacheLayers.readsMemory(request.options)
    }

    override var keyDescription: String { key.description }
    override var poolKey: StagePoolKey { .process(key) }

    override func startBelow() {
        if let prefix = keys.cachedPrefix, prefix.count == processorCount - 1 {
            process(ImageResult(container: prefix.container, urlResponse: nil, cacheType: .memory))
            return
        }
        let below = graph.imageTask(for: request, keys: keys, processorCount: processorCount - 1, isFinal: false)
        dependency = below.subscribe(priority: priority) { [self] event in
            switch event {
            case .progress(let progress): send(progress: progress)
            case .preview(let input): processPreview(input)
            case .failure(let error): fail(error)
            case .value(let input):
                dependency = nil
                supersedePreviews()
                process(input)
            }
        }
    }

    private func process(_ input: ImageResult) {
        let processor = request.processors[processorCount - 1]
        let queue = graph.configuration.processingQueue
        let item = queue.enqueue(priority: priority, cancelLater: graph.cancelAfterUnlock) { [self] in
            graph.metricsStore.withLock { $0.processorApplications += 1 }
            do {
                var output = input
                if let frames = input.container.frames {
                    let processed = try frames.map { AnimationFrame(bitmap: try processor.process($0.bitmap), duration: $0.duration) }
                    output.container.frames = processed
                    output.container.image = processed[0].bitmap
                } else {
                    output.container.image = try processor.process(input.container.image)
                }
                output.container.data = nil
                deliver(output)
            } catch {
                graph.sync {
                    operation = nil
                    fail(.processingFailed(processor: processor.identifier, error))
                }
            }
        }
        operation = (queue, item)
    }
}
