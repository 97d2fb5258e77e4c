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

    @inline(__always)
    func bytes(_ row: Int, _ column: Int) -> UnsafeRawBufferPointer {
        let r = Int32(truncatingIfNeeded: row)
        let c = Int32(truncatingIfNeeded: column)
        guard let value = PQgetvalue(handle, r, c) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: value, count: Int(PQgetlength(handle, r, c)))
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
