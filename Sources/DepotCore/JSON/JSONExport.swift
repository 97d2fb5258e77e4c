public import Foundation

/// Writes records as a JSON array of objects that ``JSONImport`` reads back as exactly the
/// same records, on every backend: integers as integers, doubles in their shortest exact form
/// (`"NaN"`, `"Infinity"` and `"-Infinity"` as strings), dates as ISO 8601 with the fractional
/// digits of the shortest decimal that reads back as the same `Double` (beyond years 0 to
/// 9999, as an exact number of seconds since 1970), UUIDs as text, bytes as base64, nil as
/// `null`. A date that is NaN or infinite is no instant and has no such form: the export
/// fails with ``DepotError/Code/invalidValue`` naming the record.
///
/// A query in primary-key order without offset or limit (every export of a whole entity or
/// a filter) is read in pages of ``pageSize`` records, each in its own snapshot, so memory
/// stays bounded whatever the size; any other query is read in one snapshot.
public enum JSONExport {
    /// Records per page of a streamed export.
    public static let pageSize = 1_000

    /// Exports the records `query` selects, handing the JSON text to `sink` in pieces;
    /// returns the number of records.
    ///
    /// - Parameters:
    ///   - query: The records to export, in its order.
    ///   - store: The store to read them from.
    ///   - keys: The JSON key of each attribute whose key differs from its name.
    ///   - progress: Called after each page with the number of records written so far.
    ///   - sink: Receives the JSON text, a piece at a time, in order.
    @discardableResult
    public static func run(
        _ query: Query, of store: any Store, keys: [String: String] = [:], progress: (@Sendable (_ records: Int) -> Void)? = nil,
        to sink: (Data) async throws -> Void
    ) async throws -> Int {
        let entity = query.entity
        let names = entity.attributes.map { JSONWriter.quoted(keys[$0.name] ?? $0.name) + ":" }
        let keyIndex = entity.primaryKeyIndex
        @Sendable func object(_ row: Row) throws -> String {
            var text = "{"
            for i in 0..<names.count {
                if i > 0 { text += "," }
                text += names[i]
                let value = row[value: i]
                if case .date(let date) = value, !date.timeIntervalSinceReferenceDate.isFinite {
                    // No text an import reads as a date stands for NaN or an infinity.
                    throw DepotError(
                        .invalidValue,
                        "The \(entity.name) with key \(row[value: keyIndex].debugLiteral) has \(date.timeIntervalSinceReferenceDate) seconds in its date \(entity.name).\(entity.attributes[i].name), which is no instant: JSON cannot hold it as a date that imports back, so the export stopped. Give the record a real date, or leave it out of the export.")
                }
                text += JSONValueConverter.text(value)
            }
            return text + "}"
        }
        var count = 0
        func emit(_ rows: [Row]) async throws {
            guard !rows.isEmpty else { return }
            var text = ""
            for row in rows {
                text += count == 0 ? "\n" : ",\n"
                text += try object(row)
                count += 1
            }
            try await sink(Data(text.utf8))
            progress?(count)
        }
        try await sink(Data("[".utf8))
        let pages = query.limit == nil && query.offset == 0 && query.sort.count == 1
            && query.sort[0].attributeIndex == keyIndex && query.sort[0].ascending
        if pages {
            let filter = query
            var last: Value?
            while true {
                let after = last
                let rows = try await store.read { transaction in
                    var rows: [Row] = []
                    let page = filter.page(after: after, size: pageSize)
                    try transaction.fetch(page, reserve: { rows.reserveCapacity($0) }) { rows.append(try $0.row()) }
                    return rows
                }
                try await emit(rows)
                guard rows.count == pageSize, let final = rows.last else { break }
                last = final[value: keyIndex]
            }
        } else {
            let rows = try await store.read { transaction in
                var rows: [Row] = []
                try transaction.fetch(query, reserve: { rows.reserveCapacity($0) }) { rows.append(try $0.row()) }
                return rows
            }
            try await emit(rows)
        }
        try await sink(Data((count == 0 ? "]\n" : "\n]\n").utf8))
        return count
    }

    /// Exports the records `query` selects as one `Data`.
    public static func data(_ query: Query, of store: any Store, keys: [String: String] = [:]) async throws -> Data {
        var data = Data()
        try await run(query, of: store, keys: keys) { data.append($0) }
        return data
    }

    /// Exports the records `query` selects into a file, written off the cooperative thread
    /// pool into a temporary file beside it that replaces `file` only once it is complete and
    /// synced: a failed export leaves an existing file as it was. Returns the number of
    /// records.
    @discardableResult
    public static func write(
        _ query: Query, of store: any Store, keys: [String: String] = [:], progress: (@Sendable (_ records: Int) -> Void)? = nil,
        to file: URL
    ) async throws -> Int {
        let writer = try await ChunkedFileWriter.open(file)
        do {
            let count = try await run(query, of: store, keys: keys, progress: progress) { try await writer.write($0) }
            try await writer.finish()
            return count
        } catch {
            await writer.abandon()
            throw error
        }
    }
}

extension Query {
    /// The next page of a primary-key-ordered query: the records after `key`.
    func page(after key: Value?, size: Int) -> Query {
        let base = Query(copying: self, limit: size)
        guard let key else { return base }
        return Query(copying: base, filter: .and([filter, .compare(entity.primaryKeyIndex, .greater, key)]))
    }
}

/// Writes a file on a dispatch queue (file calls block, and blocking work never runs on
/// Swift's cooperative pool), into a temporary file renamed over the destination at the end.
final class ChunkedFileWriter: Sendable {
    let handle: FileHandle
    let path: String
    let temporary: String
    private static let queue = DispatchQueue(label: "depot.json.file-writer")

    private init(handle: FileHandle, path: String, temporary: String) {
        self.handle = handle
        self.path = path
        self.temporary = temporary
    }

    static func open(_ file: URL) async throws -> ChunkedFileWriter {
        try await run {
            let temporary = file.path + ".depot-\(UUID().uuidString.prefix(8)).tmp"
            guard FileManager.default.createFile(atPath: temporary, contents: nil) else {
                throw DepotError(.io, "Cannot create a file in \(file.deletingLastPathComponent().path) to export into; check that the directory exists and is writable.")
            }
            do {
                return ChunkedFileWriter(handle: try FileHandle(forWritingTo: URL(fileURLWithPath: temporary)), path: file.path, temporary: temporary)
            } catch {
                try? FileManager.default.removeItem(atPath: temporary)
                throw DepotError(.io, "Cannot open \(temporary) to export into: \(error.localizedDescription)")
            }
        }
    }

    private static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    func write(_ data: Data) async throws {
        try await Self.run {
            do {
                try self.handle.write(contentsOf: data)
            } catch {
                throw DepotError(.io, "Writing the export to \(self.temporary) failed: \(error.localizedDescription)")
            }
        }
    }

    /// Syncs and closes the file, then puts it in place.
    func finish() async throws {
        try await Self.run {
            do {
                try self.handle.synchronize()
                try self.handle.close()
                if rename(self.temporary, self.path) != 0 { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            } catch {
                try? FileManager.default.removeItem(atPath: self.temporary)
                throw DepotError(.io, "Completing the export to \(self.path) failed: \(error.localizedDescription)")
            }
        }
    }

    /// Closes and removes the temporary file.
    func abandon() async {
        _ = try? await Self.run {
            try? self.handle.close()
            try? FileManager.default.removeItem(atPath: self.temporary)
        }
    }
}

extension Controller {
    /// The records `request` selects as a JSON array (see ``JSONExport``) that
    /// ``importJSON(_:options:)`` reads back as the same records.
    public func exportJSON(_ request: Request<Managed> = .all, keys: [String: String] = [:]) async throws -> Data {
        try await JSONExport.data(try request.resolved(for: try await registeredEntity()), of: store, keys: keys)
    }

    /// Writes the records `request` selects into a JSON file, streamed in pages; returns the
    /// number of records.
    @discardableResult
    public func exportJSON(_ request: Request<Managed> = .all, keys: [String: String] = [:], to file: URL) async throws -> Int {
        try await JSONExport.write(try request.resolved(for: try await registeredEntity()), of: store, keys: keys, to: file)
    }
}
