public import Foundation

/// How far an import has come, for a progress display.
public struct JSONImportProgress: Sendable, Hashable {
    /// Bytes of input read.
    public var bytesRead: Int
    /// Elements of the top-level array read so far.
    public var elementsRead: Int
    /// Elements written in committed transactions so far (inserted or updated).
    public var elementsCommitted: Int
}

/// One element the importer could not use: which, where, and why.
public struct JSONImportProblem: Sendable, Hashable, CustomStringConvertible {
    /// The element's position in the top-level array, from 0.
    public let index: Int
    /// The member's key, when one member is at fault.
    public let key: String?
    /// The offending value as JSON text (shortened).
    public let value: String?
    /// What the attribute takes.
    public let expected: String?
    /// The whole explanation.
    public let message: String

    /// The whole explanation: ``message``.
    public var description: String { message }
}

/// What an import did.
public struct JSONImportReport: Sendable, Hashable {
    /// Elements inserted as new records (of the entity imported into).
    public var inserted = 0
    /// Elements that updated an existing record.
    public var updated = 0
    /// Records written from nested objects given for references (a record nested in several
    /// elements counts each time).
    public var related = 0
    /// Elements left out (with ``JSONImportOptions/InvalidElements/skip``).
    public var skipped: [JSONImportProblem] = []

    /// An empty report.
    public init() {}
}

/// Imports JSON arrays of objects into records, and exports records as JSON that imports
/// back exactly.
///
/// Works on the stored schema (``EntityDescription``), so it needs no record type:
///
/// ```swift
/// let report = try await JSONImport.run(data, into: handle, of: store)
/// let report = try await cats.importJSON(data, options: JSONImportOptions(keys: ["name": "full_name"]))
/// ```
///
/// Each element is upserted by primary key. A member converts to its attribute's type by
/// the rules of the JSON a real API sends: numbers from numeric strings and strings from
/// numbers, integers to doubles, booleans from `0`/`1`/`"true"`, dates from ISO 8601, from
/// seconds since 1970 or from given patterns, UUIDs from strings, bytes from base64, a
/// nested object or array into a text attribute (a `Codable` attribute) as its JSON text,
/// `null` into an optional. A key missing from an element leaves the stored value as it is
/// when the record exists, and takes the attribute's default (or nil) when it is new. A
/// reference may be given as the referenced record's key or as a nested object, which is
/// imported too.
public enum JSONImport {
    /// Imports a JSON array held in memory.
    public static func run(
        _ data: Data, into entity: EntityHandle, of store: any Store, options: JSONImportOptions = JSONImportOptions()
    ) async throws -> JSONImportReport {
        var session = try await JSONImportSession(entity: entity, store: store, options: options)
        try await session.feed(Array(data), final: true)
        return try await session.finish()
    }

    /// Imports a JSON array from a file, read in chunks off the cooperative thread pool.
    public static func run(
        contentsOf file: URL, into entity: EntityHandle, of store: any Store, options: JSONImportOptions = JSONImportOptions()
    ) async throws -> JSONImportReport {
        let reader = try await ChunkedFileReader.open(file)
        defer { reader.close() }
        var session = try await JSONImportSession(entity: entity, store: store, options: options)
        while let chunk = try await reader.next() {
            try await session.feed(chunk, final: false)
        }
        try await session.feed([], final: true)
        return try await session.finish()
    }

    /// Imports a JSON array from a stream of byte chunks: an HTTP request body (with
    /// Hummingbird, `request.body.map(\.readableBytesView)`), a download. Each chunk is
    /// scanned as it arrives (small ones gathered to 256 KiB first), so the input is never
    /// held whole: memory holds a chunk and the rows not yet committed (all of them with
    /// ``JSONImportOptions/Commit/atEnd``, one batch and the elements waiting for records
    /// they refer to, at most ``JSONImportOptions/maximumWaiting``, with
    /// ``JSONImportOptions/Commit/everyBatch(_:)``). An error the stream throws ends the
    /// import like a malformed document: nothing of the uncommitted rows is written.
    public static func run<Chunks: AsyncSequence>(
        chunks: Chunks, into entity: EntityHandle, of store: any Store, options: JSONImportOptions = JSONImportOptions()
    ) async throws -> JSONImportReport where Chunks.Element: Sequence, Chunks.Element.Element == UInt8 {
        var session = try await JSONImportSession(entity: entity, store: store, options: options)
        var buffer: [UInt8] = []
        buffer.reserveCapacity(ChunkedFileReader.chunkSize)
        for try await chunk in chunks {
            buffer.append(contentsOf: chunk)
            if buffer.count >= ChunkedFileReader.chunkSize {
                try await session.feed(buffer, final: false)
                buffer.removeAll(keepingCapacity: true)
            }
        }
        try await session.feed(buffer, final: true)
        return try await session.finish()
    }

    /// Imports a JSON array from a stream of bytes, one at a time; a stream of chunks
    /// (``run(chunks:into:of:options:)``) costs an iteration per chunk instead.
    public static func run<Bytes: AsyncSequence>(
        bytes: Bytes, into entity: EntityHandle, of store: any Store, options: JSONImportOptions = JSONImportOptions()
    ) async throws -> JSONImportReport where Bytes.Element == UInt8 {
        try await run(chunks: bytes.map { CollectionOfOne($0) }, into: entity, of: store, options: options)
    }
}

extension JSONImportProblem: Error {}

extension Controller {
    /// Imports a JSON array of objects into this controller's records (see ``JSONImport``).
    public func importJSON(_ data: Data, options: JSONImportOptions = JSONImportOptions()) async throws -> JSONImportReport {
        try await JSONImport.run(data, into: try await registeredEntity(), of: store, options: options)
    }

    /// Imports a JSON file of an array of objects, read in chunks.
    public func importJSON(contentsOf file: URL, options: JSONImportOptions = JSONImportOptions()) async throws -> JSONImportReport {
        try await JSONImport.run(contentsOf: file, into: try await registeredEntity(), of: store, options: options)
    }

    /// Imports a JSON array of objects as it streams in, chunk by chunk: a request body
    /// (`request.body.map(\.readableBytesView)` in Hummingbird), never held whole (see
    /// ``JSONImport/run(chunks:into:of:options:)``).
    public func importJSON<Chunks: AsyncSequence>(
        chunks: Chunks, options: JSONImportOptions = JSONImportOptions()
    ) async throws -> JSONImportReport where Chunks.Element: Sequence, Chunks.Element.Element == UInt8 {
        try await JSONImport.run(chunks: chunks, into: try await registeredEntity(), of: store, options: options)
    }
}
