import CLibPQ

/// A query's result. Cleared when released.
final class PGResult {
    let handle: OpaquePointer

    init(_ handle: OpaquePointer) { self.handle = handle }
    deinit { PQclear(handle) }

    var rowCount: Int { Int(PQntuples(handle)) }
    var columnCount: Int { Int(PQnfields(handle)) }

    @inline(__always)
    func isNull(_ row: Int, _ column: Int) -> Bool {
        PQgetisnull(handle, Int32(truncatingIfNeeded: row), Int32(truncatingIfNeeded: column)) == 1
    }

    /// The field's bytes, inside the result: valid only while the result lives. Keep the
    /// result in a variable while they are read; on a temporary (`query(...).bytes(0, 0)`)
    /// the result is released, and its memory freed, before the bytes are read. For a
    /// single value use ``bool(_:_:)`` or ``text(_:_:)``, which read it inside the result.
    @inline(__always)
    func bytes(_ row: Int, _ column: Int) -> UnsafeRawBufferPointer {
        let r = Int32(truncatingIfNeeded: row)
        let c = Int32(truncatingIfNeeded: column)
        guard let value = PQgetvalue(handle, r, c) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: value, count: Int(PQgetlength(handle, r, c)))
    }

    /// A binary `boolean` field: true when it holds true (false when NULL or missing).
    func bool(_ row: Int, _ column: Int) -> Bool {
        row < rowCount && column < columnCount && bytes(row, column).first == 1
    }

    /// A text field as a string, copied out of the result ("" when NULL or missing).
    func text(_ row: Int, _ column: Int) -> String {
        guard row < rowCount, column < columnCount else { return "" }
        return String(decoding: bytes(row, column), as: UTF8.self)
    }

    /// The rows an INSERT, UPDATE or DELETE changed.
    var affectedRows: Int { PQcmdTuples(handle).flatMap { Int(String(cString: $0)) } ?? 0 }

    @inline(__always)
    func int64(_ row: Int, _ column: Int) -> Int64 {
        let b = bytes(row, column)
        guard b.count == 8 else { return 0 }
        return Int64(bigEndian: b.loadUnaligned(as: Int64.self))
    }
}
