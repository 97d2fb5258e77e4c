@testable import DepotLMDB
import DepotCore

/// The LMDB record decoders (`RecordFormat.decode` into a row, and `RecordColumns`, which
/// reads in place — what every read of a stored record runs) on arbitrary bytes: the first
/// byte gives the number of attributes, the next ones their types, the rest is the record.
/// Decoding gives a row or `false`, never a trap or a read outside the buffer (ASan). The
/// in-place reader accepts exactly the records the row decoder accepts and reads the same
/// values. A decoded row has one value per attribute, each of its type or nil, and
/// re-encoding it gives bytes that decode to a row that encodes to the same bytes.
enum RecordTarget {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        var input = FuzzInput(bytes)
        let types = (0..<input.choose(20)).map { _ in input.type() }
        let record = UnsafeRawBufferPointer(rebasing: bytes[min(bytes.count, 1 + types.count)...])
        // A copy with no bytes after it, so ASan sees any read past the end.
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: record.count, alignment: 1)
        defer { copy.deallocate() }
        copy.copyMemory(from: record)

        var row = Row()
        let decoded = RecordFormat.decode(UnsafeRawBufferPointer(copy), types: types, into: &row)
        let columns = RecordColumns(types: types)
        guard columns.load(UnsafeRawBufferPointer(copy)) == decoded else {
            violated("the in-place reader \(decoded ? "refused" : "accepted") a record the row decoder \(decoded ? "accepted" : "refused")")
        }
        guard decoded else { return }
        for i in types.indices {
            guard let value = try? columns.value(i), value == row[value: i] else {
                violated("the in-place reader read attribute \(i) differently from \(row[value: i].debugLiteral)")
            }
        }
        guard row.count == types.count else { violated("decoded \(row.count) values for \(types.count) attributes") }
        for (i, type) in types.enumerated() where !row[value: i].isNull && row[value: i].type != type {
            violated("attribute \(i) of type \(type) decoded as \(row[value: i].debugLiteral)")
        }
        var encoded: [UInt8] = []
        RecordFormat.encode(row, into: &encoded)
        var again = Row()
        guard encoded.withUnsafeBytes({ RecordFormat.decode($0, types: types, into: &again) }) else {
            violated("a decoded row does not decode after re-encoding: \(encoded)")
        }
        guard again == row else { violated("a row changed in a round trip: \(row) → \(again)") }
        var reencoded: [UInt8] = []
        RecordFormat.encode(again, into: &reencoded)
        guard reencoded == encoded else { violated("encoding is not stable: \(encoded) → \(reencoded)") }
    }
}
