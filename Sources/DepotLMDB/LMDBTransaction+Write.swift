import CLMDB
public import DepotCore
import Foundation

// Writes: records and their index entries, change recording.
extension LMDBTransaction {
    // MARK: WriteTransaction

    enum WriteMode { case insert, upsert, update }

    func checkWritable() throws(DepotError) {
        if isFinished {
            throw DepotError.transactionEnded
        }
        if !writable {
            throw DepotError.writeInRead
        }
    }

    /// Encodes the primary key into `keyBuffer` and every index key into `indexKeys`,
    /// refusing values over LMDB's key limit before anything is written.
    func encodeKeys(_ row: Row, _ handles: RegisteredEntity) throws(DepotError) {
        let entity = handles.entity
        keyBuffer.removeAll(keepingCapacity: true)
        KeyEncoding.appendPrimaryKey(row[value: entity.primaryKeyIndex], to: &keyBuffer)
        if keyBuffer.count > maxKeySize {
            throw DepotError(.invalidValue, "The primary key \(entity.name).\(entity.primaryKey.name) = \(row[value: entity.primaryKeyIndex].debugLiteral) takes \(keyBuffer.count) bytes as an LMDB key, over LMDB's limit of \(maxKeySize) bytes. Use a shorter key; nothing was written.")
        }
        while indexKeys.count < handles.indexes.count { indexKeys.append([]) }
        for (n, index) in handles.indexes.enumerated() {
            indexKeys[n].removeAll(keepingCapacity: true)
            let value = row[value: index.position]
            KeyEncoding.appendIndexKey(value, to: &indexKeys[n])
            if indexKeys[n].count > maxKeySize {
                let name = entity.attributes[index.position].name
                throw DepotError(.invalidValue, "\(entity.name).\(name) is indexed, and its value \(value.debugLiteral) takes \(indexKeys[n].count) bytes as an index key, over LMDB's key limit of \(maxKeySize) bytes. Store a shorter value or remove the index; nothing was written.")
            }
        }
        if handles.composites.isEmpty { return }
        while compositeKeys.count < handles.composites.count {
            compositeKeys.append([])
            compositePrefixLengths.append(0)
        }
        for (n, index) in handles.composites.enumerated() {
            compositeKeys[n].removeAll(keepingCapacity: true)
            index.appendComponents(of: row, to: &compositeKeys[n])
            compositePrefixLengths[n] = compositeKeys[n].count
            compositeKeys[n].append(contentsOf: keyBuffer)
            if compositeKeys[n].count > maxKeySize {
                throw DepotError(.invalidValue, "\(entity.name) has the index (\(index.description.summary)), and the values \(Self.describeTuple(index, row)) with the primary key take \(compositeKeys[n].count) bytes as an index key, over LMDB's key limit of \(maxKeySize) bytes. Store shorter values or remove the index; nothing was written.")
            }
        }
    }

    /// The values of `row` in the components of `index`, as a reader would write them:
    /// `(species, name) = ("cat", "Tom")`.
    static func describeTuple(_ index: CompositeHandle, _ row: Row) -> String {
        "(" + index.description.components.map(\.attribute).joined(separator: ", ") + ") = ("
            + index.positions.map { row[value: $0].debugLiteral }.joined(separator: ", ") + ")"
    }

    /// The primary key (stored bytes) of a record other than `own` whose entry in `index`
    /// starts with `prefix` (the components' encoding), or `nil` when there is none.
    func otherOwner(_ index: CompositeHandle, prefix: [UInt8], own: [UInt8]) throws -> [UInt8]? {
        try withCursor(index.dbi) { cursor in
            var key = MDB_val()
            var data = MDB_val()
            var rc = Self.withVal(prefix) { k in
                key = k
                return mdb_cursor_get(cursor, &key, &data, MDB_SET_RANGE)
            }
            while rc == 0 {
                let starts = prefix.withUnsafeBytes { p -> Bool in
                    guard key.mv_size >= p.count, let base = key.mv_data, let other = p.baseAddress else { return false }
                    return memcmp(base, other, p.count) == 0
                }
                if !starts { return nil }
                if Self.compare(data, own) != 0 { return Array(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)) }
                rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { throw fail(rc, "Reading the index (\(index.description.summary)) in \(storeName)") }
            return nil
        }
    }

    /// Built only when an error needs it, so a write allocates no text.
    func writeContext(_ entity: EntityDescription) -> String {
        "Writing a \(entity.name) record in \(storeName)"
    }

    /// Writes one row; returns whether a row with its key existed.
    func write(_ row: Row, _ handles: RegisteredEntity, mode: WriteMode) throws -> Bool {
        let entity = handles.entity
        _ = try entity.check(row)
        try encodeKeys(row, handles)
        let key = row[value: entity.primaryKeyIndex]
        // Every check runs before the first write, so a refused row leaves the transaction
        // as it was even when the caller catches the error and goes on.
        var existed = false
        if let old = try get(handles.main, keyBuffer, context: self.writeContext(handles.entity)) {
            existed = true
            if !handles.indexes.isEmpty || !handles.composites.isEmpty { try decode(old, handles, into: &oldRow) }
        }
        if mode == .insert && existed { throw DepotError.duplicateKey(entity: entity.name, key: key) }
        if mode == .update && !existed { throw DepotError.notFound(entity: entity.name, key: key) }
        for (n, index) in handles.indexes.enumerated() where index.isUnique {
            let value = row[value: index.position]
            if value.isNull { continue }
            if let owner = try get(index.dbi, indexKeys[n], context: self.writeContext(handles.entity)), Self.compare(owner, keyBuffer) != 0 {
                throw DepotError.duplicateUnique(entity: entity.name, attribute: entity.attributes[index.position].name, value: value)
            }
        }
        for (n, index) in handles.composites.enumerated() where index.isUnique {
            // Records with nil in a component never conflict, as with a unique attribute.
            if index.positions.contains(where: { row[value: $0].isNull }) { continue }
            if try otherOwner(index, prefix: Array(compositeKeys[n][..<compositePrefixLengths[n]]), own: keyBuffer) != nil {
                throw DepotError.duplicateUnique(entity: entity, index: index.description, row: row)
            }
        }
        RecordFormat.encode(row, into: &valueBuffer)
        try put(handles.main, keyBuffer, valueBuffer, context: self.writeContext(handles.entity))
        for (n, index) in handles.indexes.enumerated() {
            if existed {
                oldIndexKey.removeAll(keepingCapacity: true)
                KeyEncoding.appendIndexKey(oldRow[value: index.position], to: &oldIndexKey)
                if oldIndexKey == indexKeys[n] { continue }
                try del(index.dbi, oldIndexKey, keyBuffer, context: self.writeContext(handles.entity))
            }
            try put(index.dbi, indexKeys[n], keyBuffer, context: self.writeContext(handles.entity))
        }
        for (n, index) in handles.composites.enumerated() {
            if existed {
                oldIndexKey.removeAll(keepingCapacity: true)
                index.appendComponents(of: oldRow, to: &oldIndexKey)
                oldIndexKey.append(contentsOf: keyBuffer)
                if oldIndexKey == compositeKeys[n] { continue }
                try del(index.dbi, oldIndexKey, nil, context: self.writeContext(handles.entity))
            }
            try put(index.dbi, compositeKeys[n], keyBuffer, context: self.writeContext(handles.entity))
        }
        recorder.record(entity: entity.name, key: key, existedBefore: existed, existsAfter: true)
        return existed
    }

    public func insert(_ row: Row, into entity: EntityHandle) throws {
        try checkWritable()
        _ = try write(row, try handles(for: entity), mode: .insert)
    }

    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        try checkWritable()
        return !(try write(row, try handles(for: entity), mode: .upsert))
    }

    public func update(_ row: Row, in entity: EntityHandle) throws {
        try checkWritable()
        _ = try write(row, try handles(for: entity), mode: .update)
    }

    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        try checkWritable()
        let handles = try handles(for: entity)
        guard key.type == handles.entity.primaryKey.type else { return false }
        keyBuffer.removeAll(keepingCapacity: true)
        KeyEncoding.appendPrimaryKey(key, to: &keyBuffer)
        guard keyBuffer.count <= maxKeySize else { return false }
        guard let old = try get(handles.main, keyBuffer, context: self.writeContext(handles.entity)) else { return false }
        if !handles.indexes.isEmpty || !handles.composites.isEmpty {
            try decode(old, handles, into: &oldRow)
            for index in handles.indexes {
                oldIndexKey.removeAll(keepingCapacity: true)
                KeyEncoding.appendIndexKey(oldRow[value: index.position], to: &oldIndexKey)
                try del(index.dbi, oldIndexKey, keyBuffer, context: self.writeContext(handles.entity))
            }
            for index in handles.composites {
                oldIndexKey.removeAll(keepingCapacity: true)
                index.appendComponents(of: oldRow, to: &oldIndexKey)
                oldIndexKey.append(contentsOf: keyBuffer)
                try del(index.dbi, oldIndexKey, nil, context: self.writeContext(handles.entity))
            }
        }
        try del(handles.main, keyBuffer, nil, context: self.writeContext(handles.entity))
        recorder.record(entity: entity.name, key: key, existedBefore: true, existsAfter: false)
        return true
    }

    public func delete(_ query: Query) throws -> Int {
        try checkWritable()
        let handles = try handles(for: query.handle)
        // Collect first: deleting under an open cursor would move it.
        var keys: [Value] = []
        try fetchRows(query, reserve: { keys.reserveCapacity($0) }) { row in
            keys.append(row[value: handles.entity.primaryKeyIndex])
        }
        var deleted = 0
        for key in keys where try delete(key: key, from: query.handle) { deleted += 1 }
        return deleted
    }
}
