import Foundation

/// One element converted: the values present (nil where the key was missing), and the
/// records given as nested objects for references, to write first.
struct ConvertedElement: Sendable {
    let index: Int
    let entity: EntityHandle
    var values: [Value?]
    var nested: [ConvertedElement]

    var key: Value { values[entity.entity.primaryKeyIndex] ?? .null }
}

/// The import's state between chunks.
package struct JSONImportSession {
    let entity: EntityHandle
    let store: any Store
    let options: JSONImportOptions
    var scanner = JSONScanner([])
    var converter: JSONValueConverter
    var started = false
    var ended = false
    /// Bytes dropped from the scanner's buffer so far: offsets in messages are in the input.
    var consumed = 0
    /// The buffer size before which an incomplete element is not scanned again.
    var rescanAt = 0
    var index = 0
    var pending: [ConvertedElement] = []
    /// Elements waiting for records they refer to, in input order (all older than
    /// `pending`).
    var deferred: [ConvertedElement] = []
    /// The records the waiting elements write: a later element writing one waits too.
    var deferredKeys = Set<WrittenKey>()
    /// The number of waiting elements at which the next batch retries them: doubled after
    /// each retry, so an element is retried a bounded number of times on average.
    var retryAt = 1
    var report = JSONImportReport()
    /// Entities by name, for references given as nested objects.
    let catalog: [String: EntityHandle]

    package init(entity: EntityHandle, store: any Store, options: JSONImportOptions) async throws {
        if case .everyBatch(let size) = options.commit {
            guard size >= 1 else {
                throw DepotError(.invalidConfiguration, "A JSON import batch must hold at least one element; \(size) was given.")
            }
            retryAt = size
        }
        guard options.maximumWaiting >= 0, options.maximumSkipped >= 0 else {
            throw DepotError(.invalidConfiguration, "JSONImportOptions.maximumWaiting and maximumSkipped may not be negative (\(options.maximumWaiting) and \(options.maximumSkipped) were given).")
        }
        // Every renamed key must name an attribute, and no two attributes may be read from
        // the same key.
        var jsonKeys: [String: String] = [:]
        for attribute in entity.entity.attributes {
            let key = options.keys[attribute.name] ?? attribute.name
            if let other = jsonKeys[key] {
                throw DepotError(.invalidConfiguration, "The JSON key \"\(key)\" would be read into both \(entity.name).\(other) and \(entity.name).\(attribute.name); give one of them another key.")
            }
            jsonKeys[key] = attribute.name
        }
        if let unknown = options.keys.keys.sorted().first(where: { entity.entity.index(of: $0) == nil }) {
            throw DepotError(.invalidConfiguration, "The key mapping names \(unknown), which is not an attribute of \(entity.name) (its attributes: \(entity.entity.attributes.map(\.name).joined(separator: ", "))).")
        }
        self.entity = entity
        self.store = store
        self.options = options
        self.converter = JSONValueConverter(dateFormats: options.dateFormats)
        var catalog: [String: EntityHandle] = [:]
        for handle in try await store.storedEntities() { catalog[handle.name] = handle }
        catalog[entity.name] = entity
        self.catalog = catalog
    }

    package mutating func feed(_ chunk: [UInt8], final: Bool) async throws {
        scanner.bytes.append(contentsOf: chunk)
        // An element longer than a chunk is scanned again only once the buffer has doubled,
        // so a large element costs a few scans, not one per chunk.
        if !final && scanner.bytes.count < rescanAt { return }
        rescanAt = 0
        while true {
            let mark = scanner.position
            let wasStarted = started
            let element: JSONNode
            do throws(JSONScanError) {
                guard let next = try nextElement() else { break }
                element = next
            } catch .needsMoreInput {
                scanner.position = mark
                started = wasStarted
                if final {
                    throw malformed(started ? "the JSON ends inside the array" : "the JSON holds no array of objects", offset: consumed + scanner.bytes.count)
                }
                rescanAt = (scanner.bytes.count - scanner.position) * 2
                break
            } catch .malformed(let what, let offset) {
                throw malformed(what, offset: consumed + offset)
            }
            try convertAndQueue(element)
            if case .everyBatch(let size) = options.commit, pending.count >= size {
                try await writeBatch()
            }
        }
        if final {
            guard ended else {
                throw malformed(started ? "the array is not closed with ']'" : "the JSON holds no array of objects", offset: scanner.bytes.count)
            }
            scanner.skipWhitespace()
            if scanner.position < scanner.bytes.count { throw malformed("text after the array", offset: consumed + scanner.position) }
        }
        consumed += scanner.position
        scanner.discardConsumed()
        reportProgress()
    }

    func reportProgress() {
        options.progress?(JSONImportProgress(
            bytesRead: consumed + scanner.bytes.count, elementsRead: index, elementsCommitted: report.inserted + report.updated))
    }

    private func malformed(_ what: String, offset: Int) -> DepotError {
        DepotError(.conversionFailed, "The JSON to import into \(entity.name) is malformed at byte \(offset), near element \(index): \(what). \(committedNote)")
    }

    /// What a failed import kept: nothing, or the batches committed before the failure.
    var committedNote: String {
        let committed = report.inserted + report.updated
        let waiting = deferred.isEmpty ? "" : " (\(deferred.count) elements that were waiting for records they refer to were not written)"
        return committed == 0 ? "Nothing was written." : "The \(committed) elements of the batches before it are committed; nothing after them was written\(waiting)."
    }

    /// The next element of the top-level array, or nil at its end.
    private mutating func nextElement() throws(JSONScanError) -> JSONNode? {
        if ended {
            scanner.skipWhitespace()
            if scanner.position < scanner.bytes.count { throw .malformed("text after the array", offset: scanner.position) }
            return nil
        }
        if !started {
            try scanner.expect(UInt8(ascii: "["), "an array of objects ('[')")
            started = true
            if try scanner.peek() == UInt8(ascii: "]") {
                scanner.position += 1
                ended = true
                return nil
            }
        } else {
            let separator = try scanner.peek()
            scanner.position += 1
            if separator == UInt8(ascii: "]") {
                ended = true
                return nil
            }
            guard separator == UInt8(ascii: ",") else { throw .malformed("expected ',' or ']' between elements", offset: scanner.position - 1) }
        }
        let element = try scanner.value()
        // The separator or the end must follow; wait for it, so a number cut by the chunk's
        // end is read whole.
        _ = try scanner.peek()
        return element
    }

    private mutating func convertAndQueue(_ node: JSONNode) throws {
        defer { index += 1 }
        do {
            pending.append(try convert(node, into: entity, index: index))
        } catch let problem as JSONImportProblem {
            switch options.invalidElements {
            case .failImport:
                throw DepotError(.conversionFailed, problem.message + " " + committedNote)
            case .skip:
                report.skipped.append(problem)
                try checkSkipped()
            }
        }
    }

    private mutating func convert(_ node: JSONNode, into handle: EntityHandle, index: Int) throws -> ConvertedElement {
        let entity = handle.entity
        guard case .object(let members) = node else {
            throw JSONImportProblem(
                index: index, key: nil, value: node.excerpt, expected: "an object",
                message: "Element \(index) is \(node.kind), not an object with the attributes of \(entity.name).")
        }
        var values = [Value?](repeating: nil, count: entity.attributes.count)
        var nested: [ConvertedElement] = []
        var positions: [String: Int] = [:]
        for (i, attribute) in entity.attributes.enumerated() {
            positions[handle == self.entity ? (options.keys[attribute.name] ?? attribute.name) : attribute.name] = i
        }
        for (key, value) in members {
            guard let position = positions[key] else {
                if options.unknownKeys == .refuse {
                    throw JSONImportProblem(
                        index: index, key: key, value: value.excerpt, expected: nil,
                        message: "Element \(index) has the member \"\(key)\", which names no attribute of \(entity.name) (its attributes: \(entity.attributes.map(\.name).joined(separator: ", "))).")
                }
                continue
            }
            let attribute = entity.attributes[position]
            if let reference = attribute.reference, case .object = value {
                guard let target = catalog[reference.entity] else {
                    throw JSONImportProblem(
                        index: index, key: key, value: value.excerpt, expected: "the key of a \(reference.entity)",
                        message: "Element \(index) gives \(entity.name).\(attribute.name) a nested object, but the store does not list the entity \(reference.entity) to import it into; give its key instead.")
                }
                let child = try convert(value, into: target, index: index)
                guard let childKey = child.values[target.entity.primaryKeyIndex] else {
                    throw JSONImportProblem(
                        index: index, key: key, value: value.excerpt, expected: "an object with \(target.entity.primaryKey.name)",
                        message: "Element \(index) gives \(entity.name).\(attribute.name) a nested \(reference.entity) without its primary key \(target.entity.primaryKey.name).")
                }
                nested.append(child)
                values[position] = childKey
                continue
            }
            do {
                let converted = try converter.value(value, as: attribute.type)
                if converted.isNull && !attribute.isOptional {
                    throw JSONImportProblem(
                        index: index, key: key, value: "null", expected: attribute.type.rawValue,
                        message: "Element \(index) has null for \(entity.name).\(attribute.name), which is not optional.")
                }
                values[position] = converted
            } catch let mismatch as JSONValueConverter.Mismatch {
                throw JSONImportProblem(
                    index: index, key: key, value: value.excerpt, expected: mismatch.expected,
                    message: "Element \(index) has \(value.excerpt) for \"\(key)\" (\(entity.name).\(attribute.name)), but the attribute takes \(mismatch.expected).")
            }
        }
        guard values[entity.primaryKeyIndex] != nil else {
            let key = handle == self.entity ? (options.keys[entity.primaryKey.name] ?? entity.primaryKey.name) : entity.primaryKey.name
            throw JSONImportProblem(
                index: index, key: key, value: nil, expected: entity.primaryKey.type.rawValue,
                message: "Element \(index) has no \"\(key)\", the primary key of \(entity.name); every element needs one to be upserted.")
        }
        return ConvertedElement(index: index, entity: handle, values: values, nested: nested)
    }

    /// Fails the import once more elements were skipped than the options allow.
    func checkSkipped() throws {
        guard report.skipped.count > options.maximumSkipped, let first = report.skipped.first else { return }
        throw tooManySkipped(first: first)
    }

    func tooManySkipped(first: JSONImportProblem) -> DepotError {
        DepotError(
            .conversionFailed,
            "More than \(options.maximumSkipped) elements of the JSON for \(entity.name) are invalid (JSONImportOptions.maximumSkipped), so the import stopped; the first: \(first.message) " + committedNote)
    }

    /// Thrown inside a batch's transaction, to roll it back, when the elements it skips
    /// bring the skipped ones over the bound.
    struct TooManySkipped: Error {
        let first: JSONImportProblem
    }

    /// A record an element writes: its entity's slot and its key.
    struct WrittenKey: Hashable, Sendable {
        let slot: Int
        let key: Value
    }

    /// The records `element` writes: itself and its nested records.
    static func writtenKeys(_ element: ConvertedElement, into keys: inout Set<WrittenKey>) {
        keys.insert(WrittenKey(slot: element.entity.slot, key: element.key))
        for nested in element.nested { writtenKeys(nested, into: &keys) }
    }

    /// Writes the pending elements in one transaction. In batch mode, elements whose
    /// references name records that do not exist yet wait, and so does every later element
    /// that writes a record an earlier waiting one writes: each record is written in input
    /// order, whatever waits, so a later element for a key wins. Waiting elements are
    /// retried ahead of a batch once there are enough of them, and written in the last
    /// transaction (`last`) whatever their references.
    mutating func writeBatch(last: Bool = false) async throws {
        let batchMode = options.commit != .atEnd
        let retrying = last || deferred.count >= retryAt || deferred.count > options.maximumWaiting
        // Waiting elements are older than every pending one: they go first.
        let batch = retrying ? deferred + pending : pending
        pending.removeAll(keepingCapacity: true)
        let deferring = !last && batchMode
        let skipping = options.invalidElements == .skip
        let relationships = Relationships(handles: Array(catalog.values))
        // The records of the elements still waiting from earlier batches (none when they
        // are retried with this one).
        let blockedByCarried = retrying ? [] : deferredKeys
        let skippedBefore = report.skipped.count
        let firstSkipped = report.skipped.first
        let maximumSkipped = options.maximumSkipped
        let outcome: BatchOutcome
        do {
            outcome = try await store.write { transaction in
            var outcome = BatchOutcome()
            var writing = batch
            if deferring {
                let waiting = try Self.waitingElements(batch, blockedBy: blockedByCarried, relationships, transaction)
                outcome.deferred = waiting.sorted().map { batch[$0] }
                writing = batch.enumerated().filter { !waiting.contains($0.offset) }.map(\.element)
            }
            for element in writing {
                do {
                    try Self.write(element, transaction, &outcome)
                } catch let problem as JSONImportProblem where skipping {
                    outcome.skipped.append(problem)
                    if skippedBefore + outcome.skipped.count > maximumSkipped { throw TooManySkipped(first: firstSkipped ?? problem) }
                }
            }
            return outcome
            }
        } catch let problem as JSONImportProblem {
            throw DepotError(.conversionFailed, problem.message + " " + committedNote)
        } catch let tooMany as TooManySkipped {
            throw tooManySkipped(first: tooMany.first)
        } catch let error as DepotError where report.inserted + report.updated > 0 {
            throw DepotError(error.code, error.message + " The import stopped there. " + committedNote, nativeCode: error.nativeCode)
        }
        report.inserted += outcome.inserted
        report.updated += outcome.updated
        report.related += outcome.related
        report.skipped.append(contentsOf: outcome.skipped)
        if retrying {
            deferred = outcome.deferred
            deferredKeys = []
            if case .everyBatch(let size) = options.commit { retryAt = max(size, 2 * deferred.count) }
        } else {
            deferred.append(contentsOf: outcome.deferred)
        }
        for element in outcome.deferred { Self.writtenKeys(element, into: &deferredKeys) }
        reportProgress()
        if retrying && deferred.count > options.maximumWaiting, let first = deferred.first {
            throw DepotError(
                .missingReference,
                "More than \(options.maximumWaiting) elements of the JSON for \(entity.name) wait for records they refer to that are neither stored nor imported yet (JSONImportOptions.maximumWaiting), the first of them element \(first.index); import the records they refer to first, raise maximumWaiting, or commit at the end. " + committedNote)
        }
    }

    struct BatchOutcome: Sendable {
        var inserted = 0
        var updated = 0
        var related = 0
        var skipped: [JSONImportProblem] = []
        var deferred: [ConvertedElement] = []
    }

    /// The positions of the elements of `batch` that wait: those naming (directly or through
    /// a nested record) a record that is neither stored nor written by an element of the
    /// batch that does not wait, and those writing a record that an earlier waiting element
    /// writes (or one in `blocked`, written by elements waiting from earlier batches), so
    /// that every record is written in input order.
    ///
    /// One look-up per reference and per record whose first writer waits: a waiting element
    /// makes the later writers of its records wait, and, when it is their first writer,
    /// the elements that need those records and do not find them stored.
    static func waitingElements(
        _ batch: [ConvertedElement], blockedBy blocked: Set<WrittenKey>, _ relationships: Relationships, _ transaction: any WriteTransaction
    ) throws -> Set<Int> {
        var written: [[WrittenKey]] = []
        written.reserveCapacity(batch.count)
        var writers: [WrittenKey: [Int]] = [:]
        for (i, element) in batch.enumerated() {
            var keys = Set<WrittenKey>()
            writtenKeys(element, into: &keys)
            written.append(Array(keys))
            for key in keys { writers[key, default: []].append(i) }
        }
        var waiting = Set<Int>()
        var queue: [Int] = []
        func wait(_ i: Int) {
            if waiting.insert(i).inserted { queue.append(i) }
        }
        // The elements that need a record some element of the batch writes, and the entity
        // to look the record up in should its writers all wait.
        var dependents: [WrittenKey: [Int]] = [:]
        var targets: [Int: EntityHandle] = [:]
        for (i, element) in batch.enumerated() {
            if written[i].contains(where: blocked.contains) {
                wait(i)
                continue
            }
            var needs: [WrittenKey] = []
            var missing = false
            try forEachReference(element, relationships) { target, value in
                let key = WrittenKey(slot: target.slot, key: value)
                if writers[key] != nil {
                    needs.append(key)
                    targets[target.slot] = target
                } else if try !transaction.fetchRow(target, key: value, { _ in }) {
                    missing = true
                }
                return !missing
            }
            if missing {
                wait(i)
            } else {
                for key in needs { dependents[key, default: []].append(i) }
            }
        }
        // For each record, the earliest waiting writer handled so far: the writers after it
        // already wait.
        var blockedFrom: [WrittenKey: Int] = [:]
        while let i = queue.popLast() {
            for key in written[i] {
                guard let all = writers[key] else { continue }
                let until = blockedFrom[key] ?? Int.max
                guard i < until else { continue }
                blockedFrom[key] = i
                for j in all where j > i && j < until { wait(j) }
                // Its first writer waits: no element of this batch writes the record.
                if all.first == i, let needing = dependents[key], let target = targets[key.slot] {
                    if try !transaction.fetchRow(target, key: key.key, { _ in }) {
                        for d in needing { wait(d) }
                    }
                }
            }
        }
        return waiting
    }

    /// Calls `body` with each record `element` and its nested records refer to, except
    /// those given as the nested records themselves, until it returns false.
    @discardableResult
    private static func forEachReference(
        _ element: ConvertedElement, _ relationships: Relationships, _ body: (EntityHandle, Value) throws -> Bool
    ) throws -> Bool {
        for nested in element.nested where try !forEachReference(nested, relationships, body) { return false }
        for link in relationships.outgoing[element.entity.slot] ?? [] {
            guard let value = element.values[link.attribute], !value.isNull else { continue }
            if element.nested.contains(where: { $0.entity.slot == link.target.slot && $0.key == value }) { continue }
            if try !body(link.target, value) { return false }
        }
        return true
    }

    /// One row to write: an upsert when the element gave every attribute, otherwise an
    /// insert or an update of the row completed from the stored one.
    struct PlannedWrite {
        enum Kind { case upsert, insert, update }
        let entity: EntityHandle
        let row: Row
        let kind: Kind
        let nested: Bool
    }

    /// Upserts one element and its nested records. Every row is completed (stored values for
    /// missing keys, defaults for new records) before the first is written, so an element
    /// that cannot be completed leaves nothing behind, also when it is skipped.
    private static func write(_ element: ConvertedElement, _ transaction: any WriteTransaction, _ outcome: inout BatchOutcome) throws {
        var planned: [PlannedWrite] = []
        try plan(element, nested: false, transaction, into: &planned)
        for write in planned {
            switch write.kind {
            case .upsert:
                let inserted = try transaction.upsert(write.row, into: write.entity)
                if !write.nested { if inserted { outcome.inserted += 1 } else { outcome.updated += 1 } }
            case .insert:
                try transaction.insert(write.row, into: write.entity)
                if !write.nested { outcome.inserted += 1 }
            case .update:
                try transaction.update(write.row, in: write.entity)
                if !write.nested { outcome.updated += 1 }
            }
            if write.nested { outcome.related += 1 }
        }
    }

    private static func plan(_ element: ConvertedElement, nested: Bool, _ transaction: any WriteTransaction, into planned: inout [PlannedWrite]) throws {
        for child in element.nested { try plan(child, nested: true, transaction, into: &planned) }
        let entity = element.entity.entity
        var row = Row(capacity: entity.attributes.count)
        if element.values.allSatisfy({ $0 != nil }) {
            for value in element.values { row.append(value ?? .null) }
            planned.append(PlannedWrite(entity: element.entity, row: row, kind: .upsert, nested: nested))
            return
        }
        var existing: Row?
        _ = try transaction.fetchRow(element.entity, key: element.key) { existing = try $0.row() }
        for (i, attribute) in entity.attributes.enumerated() {
            if let value = element.values[i] {
                row.append(value)
            } else if let existing {
                row.append(existing[value: i])
            } else if let fill = attribute.defaultValue {
                row.append(fill)
            } else if attribute.isOptional {
                row.append(.null)
            } else {
                throw JSONImportProblem(
                    index: element.index, key: attribute.name, value: nil, expected: attribute.type.rawValue,
                    message: "Element \(element.index) is a new \(entity.name) without \"\(attribute.name)\", which is not optional and has no default.")
            }
        }
        planned.append(PlannedWrite(entity: element.entity, row: row, kind: existing == nil ? .insert : .update, nested: nested))
    }

    package mutating func finish() async throws -> JSONImportReport {
        // The pending elements and those still waiting, in one last transaction, checked
        // as it commits (a reference to a record the import never brought fails it).
        if !pending.isEmpty || !deferred.isEmpty || options.commit == .atEnd { try await writeBatch(last: true) }
        return report
    }
}
