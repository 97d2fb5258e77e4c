import Foundation

/// Index tuples as bytes whose `memcmp` order (the shorter first on a common prefix) is
/// Depot's order of the tuples: each component in ``Value/compare(_:_:)`` order (nil first),
/// inverted for a descending component (nil last), so one byte comparison orders a whole
/// entry. Every component's encoding is self-delimiting (no encoding is a prefix of
/// another), which is what keeps the order when components follow one another and when a
/// component's bytes are inverted.
package enum IndexKeyEncoding {
    /// The tag of a nil component.
    static let absent: UInt8 = 0x00
    /// The tag of a component with a value.
    static let present: UInt8 = 0x01

    /// Appends `value`'s encoding, inverted when `descending`. Without `tagged` (a
    /// component that is never nil: a non-optional attribute, the primary key) a value has
    /// no tag byte; nil is then never encoded.
    package static func append(_ value: Value, descending: Bool, tagged: Bool = true, to bytes: inout [UInt8]) {
        let start = bytes.count
        if tagged { bytes.append(value.isNull ? absent : present) }
        switch value {
        case .null:
            break
        case .int(let v):
            appendBigEndian(UInt64(bitPattern: v) ^ (1 << 63), to: &bytes)
        case .double(let v):
            appendDouble(v, to: &bytes)
        case .date(let v):
            appendDouble(v.timeIntervalSinceReferenceDate, to: &bytes)
        case .bool(let v):
            bytes.append(v ? 1 : 0)
        case .string(let v):
            appendEscaped(v.utf8, to: &bytes)
            bytes.append(contentsOf: [0, 0])
        case .data(let v):
            appendEscaped(v, to: &bytes)
            bytes.append(contentsOf: [0, 0])
        case .uuid(let v):
            withUnsafeBytes(of: v.uuid) { bytes.append(contentsOf: $0) }
        }
        if descending { invert(&bytes, from: start) }
    }

    /// Writes the encoding of a fixed-width `value` (see ``fixedWidth(of:)``; nil only when
    /// `tagged`) at `target`, the same bytes ``append(_:descending:tagged:to:)`` appends,
    /// and returns how many it wrote; a string or data value writes nothing and returns nil.
    /// A bulk insert writes its keys into one buffer this way, with no array growth per byte.
    package static func write(_ value: Value, descending: Bool, tagged: Bool, to target: UnsafeMutableRawPointer) -> Int? {
        var width = 0
        if tagged {
            target.storeBytes(of: value.isNull ? absent : present, as: UInt8.self)
            width = 1
        }
        switch value {
        case .null:
            break
        case .int(let v):
            target.storeBytes(of: (UInt64(bitPattern: v) ^ (1 << 63)).bigEndian, toByteOffset: width, as: UInt64.self)
            width += 8
        case .double(let v):
            target.storeBytes(of: orderedBits(v).bigEndian, toByteOffset: width, as: UInt64.self)
            width += 8
        case .date(let v):
            target.storeBytes(of: orderedBits(v.timeIntervalSinceReferenceDate).bigEndian, toByteOffset: width, as: UInt64.self)
            width += 8
        case .bool(let v):
            target.storeBytes(of: v ? 1 : 0, toByteOffset: width, as: UInt8.self)
            width += 1
        case .uuid(let v):
            target.storeBytes(of: v.uuid, toByteOffset: width, as: uuid_t.self)
            width += 16
        case .string, .data:
            return nil
        }
        if descending {
            for i in 0..<width { target.storeBytes(of: ~target.load(fromByteOffset: i, as: UInt8.self), toByteOffset: i, as: UInt8.self) }
        }
        return width
    }

    /// The bytes of a value of `type` when every value has the same number (the tag
    /// byte not counted), or nil.
    static func fixedWidth(of type: AttributeType) -> Int? {
        switch type {
        case .int64, .double, .date: 8
        case .bool: 1
        case .uuid: 16
        case .string, .data: nil
        }
    }

    /// Appends the bytes every string starting with `prefix` begins with (its tag and
    /// escaped bytes, without the terminator), inverted when `descending`: the strings with
    /// that prefix are the encodings that start with these bytes.
    static func appendStringPrefix(_ prefix: String, descending: Bool, tagged: Bool = true, to bytes: inout [UInt8]) {
        let start = bytes.count
        if tagged { bytes.append(present) }
        appendEscaped(prefix.utf8, to: &bytes)
        if descending { invert(&bytes, from: start) }
    }

    /// The smallest byte string above every string that starts with `bytes`, or nil when
    /// there is none (all bytes 0xFF): the exclusive end of the range of that prefix.
    static func successor(_ bytes: [UInt8]) -> [UInt8]? {
        var out = bytes
        while let last = out.last {
            if last == 0xFF {
                out.removeLast()
            } else {
                out[out.count - 1] = last + 1
                return out
            }
        }
        return nil
    }

    /// Sorts `count` records of `recordStride` bytes (a multiple of 8), laid end to end at
    /// `records`, by their first `keyWidth` bytes in byte order, equal keys in the order
    /// they came; the bytes after the key travel with it. A least-significant-digit radix
    /// sort: one stable counting pass per byte position, from the last to the first, each
    /// reading the records in order and writing them to 256 runs, between `records` and
    /// `scratch` (as large). Returns the one that holds the sorted records.
    ///
    /// The records move rather than a permutation of positions, so whoever reads the
    /// sorted keys reads them in memory order. A position where every key has the same byte
    /// (the high bytes of small integers, tags, padding) orders nothing and gets no pass;
    /// nor do the positions from `sortedFrom` on when the records already come in the order
    /// of those bytes (the primary keys of a bulk save made in key order), since each
    /// pass is stable.
    package static func radixSort(
        _ records: UnsafeMutableRawPointer, scratch: UnsafeMutableRawPointer,
        recordStride: Int, keyWidth: Int, count: Int, sortedFrom: Int
    ) -> UnsafeMutableRawPointer {
        guard count > 1, keyWidth > 0, recordStride >= keyWidth, recordStride % 8 == 0 else { return records }
        // Every position's byte histogram, in one pass over the records.
        var counts = [Int](repeating: 0, count: keyWidth * 256)
        counts.withUnsafeMutableBufferPointer { counts in
            var base = records
            for _ in 0..<count {
                for position in 0..<keyWidth { counts[position &* 256 &+ Int(base.load(fromByteOffset: position, as: UInt8.self))] &+= 1 }
                base += recordStride
            }
        }
        var lastPass = keyWidth
        if sortedFrom >= 0, sortedFrom < keyWidth {
            var ordered = true
            var previous = records + sortedFrom
            for _ in 1..<count {
                let next = previous + recordStride
                if memcmp(previous, next, keyWidth - sortedFrom) > 0 {
                    ordered = false
                    break
                }
                previous = next
            }
            if ordered { lastPass = sortedFrom }
        }
        let words = recordStride / 8
        var source = records
        var target = scratch
        var starts = [Int](repeating: 0, count: 256)
        var position = lastPass
        while position > 0 {
            position -= 1
            let histogram = counts[(position * 256)..<(position * 256 + 256)]
            if histogram.contains(count) { continue }
            var total = 0
            for (byte, n) in histogram.enumerated() {
                starts[byte] = total
                total += n
            }
            starts.withUnsafeMutableBufferPointer { starts in
                var from = source
                for _ in 0..<count {
                    let byte = Int(from.load(fromByteOffset: position, as: UInt8.self))
                    let to = target + starts[byte] &* recordStride
                    starts[byte] &+= 1
                    for word in 0..<words {
                        to.storeBytes(of: from.load(fromByteOffset: word &* 8, as: UInt64.self), toByteOffset: word &* 8, as: UInt64.self)
                    }
                    from += recordStride
                }
            }
            swap(&source, &target)
        }
        return source
    }

    private static func appendBigEndian(_ v: UInt64, to bytes: inout [UInt8]) {
        var shift: UInt64 = 56
        while true {
            bytes.append(UInt8(truncatingIfNeeded: v >> shift))
            if shift == 0 { break }
            shift -= 8
        }
    }

    /// Doubles in Depot's order: negative values below positive ones, `-0.0` equal to
    /// `0.0`, NaN above everything and equal to itself.
    private static func appendDouble(_ v: Double, to bytes: inout [UInt8]) {
        appendBigEndian(orderedBits(v), to: &bytes)
    }

    /// `v`'s bits as an unsigned number in Depot's order of doubles.
    private static func orderedBits(_ v: Double) -> UInt64 {
        let canonical: Double = v.isNaN ? .nan : (v == 0 ? 0 : v)
        let bits = canonical.bitPattern
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    /// Bytes with 0x00 written as 0x00 0xFF, so the terminator 0x00 0x00 sorts below any
    /// continuation: a string sorts before every longer string it is a prefix of.
    private static func appendEscaped(_ source: some Sequence<UInt8>, to bytes: inout [UInt8]) {
        for byte in source {
            bytes.append(byte)
            if byte == 0 { bytes.append(0xFF) }
        }
    }

    private static func invert(_ bytes: inout [UInt8], from start: Int) {
        var i = start
        while i < bytes.count {
            bytes[i] = ~bytes[i]
            i += 1
        }
    }
}

/// An ordered secondary index of a memory table: an entry per row, keyed by the encoded
/// tuple of its components followed by the primary key (so entries are unique and equal
/// components are ordered by key), holding the row itself (a reference to the table's
/// copy-on-write storage, not a copy): a read through the index needs no lookup by key.
/// A persistent B+ tree like the rows, so a snapshot shares it and a write copies only the
/// nodes on its path.
struct MemoryIndex: Sendable {
    /// The indexed attributes, most significant first.
    let components: [IndexDescription.Component]
    /// Their positions in the entity.
    let positions: [Int]
    /// Whether two rows with the same non-nil components are refused.
    let isUnique: Bool
    /// The position of the primary key, the implicit last component.
    let keyPosition: Int
    /// Whether each component can be nil, so its values carry a tag byte.
    let tagged: [Bool]
    /// Whether every entry key fits 16 bytes of one width (fixed-width components and key),
    /// so keys are held as `Value.uuid`, inline, zero-padded, instead of `Value.data`, which
    /// allocates each: what keeps an index on a number cheap to write. Both compare as
    /// their bytes.
    let inlineKeys: Bool
    /// The most bytes an entry key takes when every component and the key have fixed
    /// widths (a nil component takes only its tag byte), else nil: what lets a batch of
    /// entries be encoded into slots of one width and radix-sorted.
    let maximumKeyWidth: Int?
    /// Encoded tuple + key → the row.
    var entries = RowTree()

    init(components: [IndexDescription.Component], unique: Bool, in entity: EntityDescription) {
        self.components = components
        let positions = components.map { entity.index(of: $0.attribute) ?? 0 }
        self.positions = positions
        self.isUnique = unique
        self.keyPosition = entity.primaryKeyIndex
        let tagged = positions.map { entity.attributes[$0].isOptional }
        self.tagged = tagged
        var width: Int? = IndexKeyEncoding.fixedWidth(of: entity.primaryKey.type)
        for (position, isTagged) in zip(positions, tagged) {
            width = width.flatMap { total in IndexKeyEncoding.fixedWidth(of: entity.attributes[position].type).map { total + $0 + (isTagged ? 1 : 0) } }
        }
        self.inlineKeys = (width ?? .max) <= 16
        self.maximumKeyWidth = width
    }

    /// The entry key (or range bound) with these bytes.
    func key(_ bytes: some Collection<UInt8>) -> Value {
        Self.key(bytes, inline: inlineKeys)
    }

    /// The key with these bytes, inline (see ``inlineKeys``) or not.
    static func key(_ bytes: some Collection<UInt8>, inline: Bool) -> Value {
        guard inline else { return .data(Data(bytes)) }
        var padded: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &padded) { target in
            var i = 0
            for byte in bytes {
                guard i < 16 else { break }
                target[i] = byte
                i += 1
            }
        }
        return .uuid(UUID(uuid: padded))
    }

    /// The bytes of an entry key (with its padding, for inline keys).
    func bytes(of key: Value) -> [UInt8] {
        switch key {
        case .uuid(let value): withUnsafeBytes(of: value.uuid) { Array($0) }
        case .data(let value): Array(value)
        default: []
        }
    }

    /// The indexes a table keeps: one per indexed attribute (the primary key has the table
    /// itself), then the entity's declared indexes.
    static func all(for entity: EntityDescription) -> [MemoryIndex] {
        var indexes: [MemoryIndex] = []
        for (position, attribute) in entity.attributes.enumerated() where attribute.isIndexed && position != entity.primaryKeyIndex {
            indexes.append(MemoryIndex(components: [.init(attribute.name)], unique: false, in: entity))
        }
        for index in entity.indexes {
            indexes.append(MemoryIndex(components: index.components, unique: index.isUnique, in: entity))
        }
        return indexes
    }

    /// The encoded components of `row`.
    func tuple(of row: Row) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(positions.count * 10 + 10)
        appendTuple(of: row, to: &bytes)
        return bytes
    }

    /// Appends the encoded components of `row`.
    func appendTuple(of row: Row, to bytes: inout [UInt8]) {
        for (i, position) in positions.enumerated() {
            IndexKeyEncoding.append(row[value: position], descending: components[i].isDescending, tagged: tagged[i], to: &bytes)
        }
    }

    /// Appends the entry key of `row`: its components, then its primary key.
    func appendEntryKey(of row: Row, to bytes: inout [UInt8]) {
        appendTuple(of: row, to: &bytes)
        IndexKeyEncoding.append(row[value: keyPosition], descending: false, tagged: false, to: &bytes)
    }

    /// The entry key of `row`.
    func entryKey(of row: Row) -> Value {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(positions.count * 10 + 10)
        appendEntryKey(of: row, to: &bytes)
        return key(bytes)
    }

    /// Adds `row`'s entry, or replaces the row an entry with its key holds.
    mutating func insert(_ row: Row) {
        entries.updateValue(row, forKey: entryKey(of: row))
    }

    /// Adds the entries of new rows, none of which has an entry yet. They are encoded
    /// into one buffer and sorted there, then put in the tree in order: as whole leaves
    /// hung on its right edge when they all sort after its last entry (a bulk save into an
    /// empty or ascending index), else one descent each. Keys of fixed widths sit in slots
    /// of one width, zero-padded (entry keys are prefix-free, so padding changes no order),
    /// and are radix-sorted; others are sorted by comparison.
    mutating func insertNew(_ rows: [Row]) {
        guard !rows.isEmpty else { return }
        let owned = UnsafeMutableBufferPointer<Row>.allocate(capacity: rows.count)
        _ = owned.initialize(fromContentsOf: rows)
        insertNew(moving: owned)
    }

    /// ``insertNew(_:)`` with `owned`, initialized rows, every one of which this moves into
    /// the tree (their references become the entries', with no retain or release); it
    /// deallocates `owned`. The rows are read in `owned`'s order (the order they were
    /// made in, so their storage is touched one row after another) and moved in key order.
    mutating func insertNew(moving owned: UnsafeMutableBufferPointer<Row>) {
        defer { owned.deallocate() }
        let count = owned.count
        guard count > 0, let base = owned.baseAddress else { return }
        if let stride = maximumKeyWidth.map({ inlineKeys ? 16 : $0 }) {
            insertFixedWidth(count: count, rows: base, stride: stride)
            return
        }
        var bytes: [UInt8] = []
        var ends: [Int] = []
        ends.reserveCapacity(count)
        for row in owned {
            appendEntryKey(of: row, to: &bytes)
            ends.append(bytes.count)
        }
        var order = Array(0..<count)
        bytes.withUnsafeBytes { buffer in
            order.sort {
                Value.compareBuffers(
                    UnsafeRawBufferPointer(rebasing: buffer[($0 == 0 ? 0 : ends[$0 - 1])..<ends[$0]]),
                    UnsafeRawBufferPointer(rebasing: buffer[($1 == 0 ? 0 : ends[$1 - 1])..<ends[$1]])) < 0
            }
            hang(count: count) { j in
                let k = order[j]
                return (Self.key(UnsafeRawBufferPointer(rebasing: buffer[(k == 0 ? 0 : ends[k - 1])..<ends[k]]), inline: false), (base + k).move())
            }
        }
    }

    /// The fixed-width case of ``insertNew(moving:)``: every key written straight into a
    /// zeroed slot of `stride` bytes, followed by its row's position, and the slots
    /// radix-sorted, so that the tree is filled reading keys in memory order.
    private mutating func insertFixedWidth(count: Int, rows base: UnsafeMutablePointer<Row>, stride: Int) {
        // The slot, then the row's position (and, for keys that are not inline, the key's
        // length), rounded up to whole words for the sort's copies.
        let positionOffset = (stride + 7) / 8 * 8
        let recordStride = positionOffset + (inlineKeys ? 8 : 16)
        let records = UnsafeMutableRawPointer.allocate(byteCount: recordStride * count * 2, alignment: 8)
        defer { records.deallocate() }
        records.initializeMemory(as: UInt8.self, repeating: 0, count: recordStride * count)
        // The primary key's offset when every key has it at the same one (no component can
        // be nil, so none is shorter), where the sort checks whether the rows already come
        // in key order.
        var keyOffset: Int? = tagged.contains(true) ? nil : 0
        var slot = records
        for k in 0..<count {
            let row = base[k]
            var width = 0
            for (i, position) in positions.enumerated() {
                width += IndexKeyEncoding.write(row[value: position], descending: components[i].isDescending, tagged: tagged[i], to: slot + width) ?? 0
            }
            if k == 0, keyOffset != nil { keyOffset = width }
            width += IndexKeyEncoding.write(row[value: keyPosition], descending: false, tagged: false, to: slot + width) ?? 0
            slot.storeBytes(of: k, toByteOffset: positionOffset, as: Int.self)
            if !inlineKeys { slot.storeBytes(of: width, toByteOffset: positionOffset + 8, as: Int.self) }
            slot += recordStride
        }
        let sorted = IndexKeyEncoding.radixSort(
            records, scratch: records + recordStride * count, recordStride: recordStride,
            keyWidth: stride, count: count, sortedFrom: keyOffset ?? stride)
        let inline = inlineKeys
        hang(count: count) { j in
            let record = sorted + j &* recordStride
            let row = (base + record.load(fromByteOffset: positionOffset, as: Int.self)).move()
            if inline {
                return (.uuid(UUID(uuid: record.loadUnaligned(as: uuid_t.self))), row)
            }
            let length = record.load(fromByteOffset: positionOffset + 8, as: Int.self)
            return (Self.key(UnsafeRawBufferPointer(start: record, count: length), inline: false), row)
        }
    }

    /// Moves the entries into the tree, the `j`-th of `count` (in key order) being
    /// `entry(j)`, which moves its row out of the caller's buffer: each is asked for once.
    private mutating func hang(count: Int, entry: (Int) -> (key: Value, row: Row)) {
        guard count > 0 else { return }
        let first = entry(0)
        if entries.lastKey.map({ RowTree.compare(first.key, $0) > 0 }) ?? true {
            entries.appendAscending(count: count) { j in j == 0 ? first : entry(j) }
        } else {
            entries.updateValue(first.row, forKey: first.key)
            for j in 1..<count {
                let (key, row) = entry(j)
                entries.updateValue(row, forKey: key)
            }
        }
    }

    /// Removes `row`'s entry.
    mutating func remove(_ row: Row) {
        entries.removeValue(forKey: entryKey(of: row))
    }

    /// The key of another row whose components equal `row`'s, when the index is unique and
    /// none of `row`'s components is nil (rows with a nil component never conflict).
    func conflict(with row: Row, key: Value) -> Value? {
        guard isUnique, !positions.contains(where: { row[value: $0].isNull }) else { return nil }
        let tuple = tuple(of: row)
        var found: Value?
        entries.forEachEntry(from: entries.rank(of: self.key(tuple))) { entryKey, entry in
            guard bytes(of: entryKey).starts(with: tuple) else { return false }
            if entry[value: keyPosition] != key {
                found = entry[value: keyPosition]
                return false
            }
            return true
        }
        return found
    }

    /// The refusal of a row that shares a unique index's values with another.
    func duplicate(_ row: Row, entity: EntityDescription) -> DepotError {
        DepotError.duplicateUnique(entity: entity, index: IndexDescription(components, unique: true), row: row)
    }
}
