import CSQLite
import DepotCore

// `depot_accumulate(x)`: an SQLite aggregate function that keeps Depot's own state for a
// sum or an average (count of values, 128-bit integer sum, exact double sum) and
// hands it back as a blob, which `AccumulatorState` turns into the same
// `AggregateAccumulator` the other backends finish with. So SQLite groups and scans, and
// every backend computes the same integer (or overflow error) and the same double.

/// The state between steps, owned by SQLite's aggregate context through a retained pointer.
private final class AccumulatorBox {
    var count: Int64 = 0
    var integerSum: Int128 = 0
    var doubleSum = ExactSum()
}

extension Connection {
    /// Registers `depot_accumulate` on this connection.
    func registerAggregateFunctions() throws(DepotError) {
        guard let handle else { return }
        let rc = sqlite3_create_function_v2(
            handle, "depot_accumulate", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, nil,
            { context, _, arguments in
                guard let context, let arguments, let argument = arguments[0] else { return }
                let type = sqlite3_value_type(argument)
                if type == SQLITE_NULL { return }
                guard let slot = sqlite3_aggregate_context(context, Int32(MemoryLayout<UnsafeMutableRawPointer?>.size)) else {
                    sqlite3_result_error_nomem(context)
                    return
                }
                let pointer = slot.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
                let box: AccumulatorBox
                if let existing = pointer.pointee {
                    box = Unmanaged<AccumulatorBox>.fromOpaque(existing).takeUnretainedValue()
                } else {
                    box = AccumulatorBox()
                    pointer.pointee = Unmanaged.passRetained(box).toOpaque()
                }
                box.count += 1
                switch type {
                case SQLITE_INTEGER: box.integerSum += Int128(sqlite3_value_int64(argument))
                case SQLITE_FLOAT: box.doubleSum.add(sqlite3_value_double(argument))
                // A REAL column holds NaN as a blob (see StatementColumns).
                default: box.doubleSum.add(.nan)
                }
            },
            { context in
                guard let context else { return }
                // Size 0: the context if a step made one, nil otherwise (no values).
                guard let slot = sqlite3_aggregate_context(context, 0),
                    let stored = slot.assumingMemoryBound(to: UnsafeMutableRawPointer?.self).pointee
                else {
                    sqlite3_result_null(context)
                    return
                }
                let box = Unmanaged<AccumulatorBox>.fromOpaque(stored).takeRetainedValue()
                slot.assumingMemoryBound(to: UnsafeMutableRawPointer?.self).pointee = nil
                var words: [UInt64] = [
                    UInt64(bitPattern: box.count), UInt64(truncatingIfNeeded: box.integerSum >> 64), UInt64(truncatingIfNeeded: box.integerSum),
                ]
                words.append(contentsOf: box.doubleSum.serialized)
                words.withUnsafeBytes { bytes in
                    sqlite3_result_blob64(context, bytes.baseAddress, sqlite3_uint64(bytes.count), unsafeBitCast(-1, to: sqlite3_destructor_type.self))
                }
            }, nil)
        guard rc == SQLITE_OK else {
            throw DepotError.sqlite(rc, message: String(cString: sqlite3_errmsg(handle)), context: "Registering Depot's aggregate function")
        }
    }
}

/// The state `depot_accumulate` returned, merged into an accumulator.
enum AccumulatorState {
    static func merge(_ statement: OpaquePointer, column: Int32, into accumulator: inout AggregateAccumulator, entity: String) throws(DepotError) {
        if sqlite3_column_type(statement, column) == SQLITE_NULL { return }
        let count = Int(sqlite3_column_bytes(statement, column))
        guard count >= 48, count % 8 == 0, let blob = sqlite3_column_blob(statement, column) else {
            throw DepotError(.storeCorrupted, "SQLite returned \(count) bytes of aggregate state for \(entity); expected Depot's own.")
        }
        let bytes = UnsafeRawBufferPointer(start: blob, count: count)
        func word(_ index: Int) -> UInt64 { bytes.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self) }
        let integerSum = Int128(Int64(bitPattern: word(1))) << 64 | Int128(word(2))
        let doubleSum = try ExactSum(serialized: (3..<(count / 8)).lazy.map(word))
        accumulator.merge(count: Int64(bitPattern: word(0)), integerSum: integerSum, doubleSum: doubleSum)
    }
}
