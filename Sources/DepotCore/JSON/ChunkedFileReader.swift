import Foundation

/// Reads a file in chunks on a dispatch queue: file reads block, and blocking work never
/// runs on Swift's cooperative pool.
///
/// The file handle is made and used only in blocks of the reader's own serial queue, so
/// every access is ordered by the queue (which Thread Sanitizer sees), not by a hand-off
/// from the thread that opened the file through a continuation to another queue thread.
final class ChunkedFileReader: @unchecked Sendable {
    static let chunkSize = 1 << 18
    private let queue = DispatchQueue(label: "depot.json.file")
    /// Touched only on `queue`.
    private var handle: FileHandle?

    private init() {}

    /// Opens the file on the reader's queue: opening blocks too.
    static func open(_ file: URL) async throws -> ChunkedFileReader {
        let reader = ChunkedFileReader()
        try await reader.onQueue { () throws(DepotError) in
            do {
                reader.handle = try FileHandle(forReadingFrom: file)
            } catch {
                throw DepotError(.io, "Cannot open \(file.path) to import: \(error.localizedDescription)")
            }
        }
        return reader
    }

    func next() async throws -> [UInt8]? {
        try await onQueue { () throws(DepotError) -> [UInt8]? in
            guard let handle = self.handle else { return nil }
            do {
                let data = try handle.read(upToCount: Self.chunkSize) ?? Data()
                return data.isEmpty ? nil : Array(data)
            } catch {
                throw DepotError(.io, "Reading the file to import failed: \(error.localizedDescription)")
            }
        }
    }

    /// Closing a file opened for reading does not wait for the disk.
    func close() {
        queue.async {
            try? self.handle?.close()
            self.handle = nil
        }
    }

    private func onQueue<T: Sendable>(_ body: @escaping @Sendable () throws(DepotError) -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                do {
                    continuation.resume(returning: try body())
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}
