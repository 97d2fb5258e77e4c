import Foundation

/// The memory store's reader of a stored row during a fetch: the row's values through a
/// pointer the fetch holds only while the row is read.
///
/// ``RowColumns`` holds its row as a property, and a class's property is retained and
/// released around every read of it (the compiler cannot see that nothing replaces it
/// meanwhile): once per attribute of every record, plus once to point the reader at each
/// row, the largest cost of a fetch of all records after the decoding itself. The rows of
/// a snapshot live as long as the snapshot, so a pointer to one row's values, valid for
/// the body's call (a `ColumnReader` is only read during it), reads them with neither.
final class RowBufferColumns: ColumnReader {
    @exclusivity(unchecked) var values = UnsafeBufferPointer<Value>(start: nil, count: 0)

    /// Calls `body` with this reader pointed at `row`.
    @inline(__always)
    func reading<T>(_ row: Row, _ body: (RowBufferColumns) throws -> T) rethrows -> T {
        try row.values.withUnsafeBufferPointer { buffer in
            values = buffer
            defer { values = UnsafeBufferPointer(start: nil, count: 0) }
            return try body(self)
        }
    }

    var columnCount: Int { values.count }

    @inline(__always)
    func at(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < values.count else { throw columnOutOfRange(index, count: values.count) }
        return values[index]
    }

    func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < values.count else { return true }
        return values[index].isNull
    }
    func int64(_ index: Int) throws(DepotError) -> Int64 { try Int64(value: at(index)) }
    func double(_ index: Int) throws(DepotError) -> Double { try Double(value: at(index)) }
    func bool(_ index: Int) throws(DepotError) -> Bool { try Bool(value: at(index)) }
    func string(_ index: Int) throws(DepotError) -> String { try String(value: at(index)) }
    func data(_ index: Int) throws(DepotError) -> Data { try Data(value: at(index)) }
    func date(_ index: Int) throws(DepotError) -> Date { try Date(value: at(index)) }
    func uuid(_ index: Int) throws(DepotError) -> UUID { try UUID(value: at(index)) }
    func value(_ index: Int) throws(DepotError) -> Value { try at(index) }
}
