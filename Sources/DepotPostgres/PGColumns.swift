import CLibPQ
import DepotCore
import Foundation

/// A `ColumnReader` over one row of a binary-format result: each read decodes the
/// column's bytes by its declared type, with no `Value` built in between.
final class PGColumns: ColumnReader {
    let result: PGResult
    var row = 0
    private let types: [AttributeType]
    private let entity: String

    init(_ result: PGResult, types: [AttributeType], entity: String) {
        self.result = result
        self.types = types
        self.entity = entity
    }

    @inline(__always)
    private func bytes<T>(_ index: Int, _ type: T.Type, count: Int? = nil) throws(DepotError) -> UnsafeRawBufferPointer {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        if result.isNull(row, index) { throw storedNil(T.self, at: index) }
        let bytes = result.bytes(row, index)
        if let count, bytes.count != count {
            throw DepotError(.storeCorrupted, "A \(types[index].rawValue) column of \(entity) holds \(bytes.count) bytes instead of \(count); the table was changed outside Depot.")
        }
        return bytes
    }

    var columnCount: Int { types.count }

    func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < types.count else { return true }
        return result.isNull(row, index)
    }

    func int64(_ index: Int) throws(DepotError) -> Int64 {
        Int64(bigEndian: try bytes(index, Int64.self, count: 8).loadUnaligned(as: Int64.self))
    }

    func bool(_ index: Int) throws(DepotError) -> Bool {
        try bytes(index, Bool.self, count: 1)[0] != 0
    }

    func double(_ index: Int) throws(DepotError) -> Double {
        Double(bitPattern: UInt64(bigEndian: try bytes(index, Double.self, count: 8).loadUnaligned(as: UInt64.self)))
    }

    func date(_ index: Int) throws(DepotError) -> Date {
        let seconds = Double(bitPattern: UInt64(bigEndian: try bytes(index, Date.self, count: 8).loadUnaligned(as: UInt64.self)))
        return Date(timeIntervalSinceReferenceDate: seconds)
    }

    func string(_ index: Int) throws(DepotError) -> String {
        PGText.decode(try bytes(index, String.self))
    }

    func data(_ index: Int) throws(DepotError) -> Data {
        let raw = try bytes(index, Data.self)
        guard let base = raw.baseAddress, raw.count > 0 else { return Data() }
        return Data(bytes: base, count: raw.count)
    }

    func uuid(_ index: Int) throws(DepotError) -> UUID {
        let raw = try bytes(index, UUID.self, count: 16)
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: raw) }
        return UUID(uuid: uuid)
    }

    func value(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        if result.isNull(row, index) { return .null }
        switch types[index] {
        case .int64: return .int(try int64(index))
        case .bool: return .bool(try bool(index))
        case .double: return .double(try double(index))
        case .date: return .date(try date(index))
        case .string: return .string(try string(index))
        case .data: return .data(try data(index))
        case .uuid: return .uuid(try uuid(index))
        }
    }
}
