import Foundation

/// The decode stage: subscribes to the fetch stage, then decodes the bytes at the request's
/// decode size on a decoding worker thread.
final class DecodeTask: SharedTask<ImageResult>, @unchecked Sendable { // state guarded by graph.lock
    let request: ImageRequest
    let key: DecodeKey

    init(graph: WorkGraph, request: ImageRequest, key: DecodeKey) {
        self.request = request
        self.key = key
        super.init(graph: graph, stage: .decode)
    }

    override var keyDescription: String { key.description }

    override func start() {
        dependency = graph.fetchTask(for: request, key: key.fetch).subscribe(priority: priority) { [self] event in
            switch event {
            case .progress(let progress): send(progress: progress)
            case .failure(let error): fail(error)
            case .value(let fetched):
                dependency = nil
                decode(fetched)
            }
        }
    }

    private func decode(_ fetched: FetchedData) {
        let configuration = graph.configuration
        let options = DecodeOptions(size: request.thumbnail, maximumPixelCount: configuration.maximumDecodedPixelCount)
        let context = ImageDecodingContext(request: request, urlResponse: fetched.urlResponse, options: options)
        let decoder = configuration.decoder
        let queue = configuration.decodingQueue
        let item = queue.enqueue(priority: priority) { [self] in
            graph.metricsStore.withLock { $0.decodes += 1 }
            let result: Result<ImageContainer, ImagePipeline.Error>
            do {
                result = .success(try decoder.decode(fetched.data, context: context))
            } catch {
                result = .failure(.decodingFailed(error))
            }
            graph.sync {
                operation = nil
                switch result {
                case .success(let container): finish(with: ImageResult(container: container, urlResponse: fetched.urlResponse))
                case .failure(let error): fail(error)
                }
            }
        }
        operation = (queue, item)
    }
}

/// A processing stage: subscribes to the stage below (the previous processor prefix, or the
/// decode), then applies one processor on a processing worker thread.
final class ProcessTask: SharedTask<ImageResult>, @unchecked Sendable { // state guarded by graph.lock
    let request: ImageRequest
    let keys: RequestKeys
    let processorCount: Int

    init(graph: WorkGraph, request: ImageRequest, keys: RequestKeys, processorCount: Int) {
        self.request = request
        self.keys = keys
        self.processorCount = processorCount
        super.init(graph: graph, stage: .process)
    }

    var key: ProcessKey { keys.process[processorCount - 1] }

    override var keyDescription: String { key.description }

    override func start() {
        let below = graph.imageTask(for: request, keys: keys, processorCount: processorCount - 1)
        dependency = below.subscribe(priority: priority) { [self] event in
            switch event {
            case .progress(let progress): send(progress: progress)
            case .failure(let error): fail(error)
            case .value(let input):
                dependency = nil
                process(input)
            }
        }
    }

    private func process(_ input: ImageResult) {
        let processor = request.processors[processorCount - 1]
        let queue = graph.configuration.processingQueue
        let item = queue.enqueue(priority: priority) { [self] in
            graph.metricsStore.withLock { $0.processorApplications += 1 }
            let result: Result<ImageResult, ImagePipeline.Error>
            do {
                var output = input
                output.container.image = try processor.process(input.container.image)
                output.container.data = nil
                result = .success(output)
            } catch {
                result = .failure(.processingFailed(processor: processor.identifier, error))
            }
            graph.sync {
                operation = nil
                switch result {
                case .success(let output): finish(with: output)
                case .failure(let error): fail(error)
                }
            }
        }
        operation = (queue, item)
    }
}
