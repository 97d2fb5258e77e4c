import CLibPQ
import DepotCore
import Foundation

/// One parameter in PostgreSQL's binary format, with its type's OID (0 lets the server
/// infer it, for NULL).
struct PGParam {
    var oid: Oid
    var bytes: [UInt8]?

    static let int8Oid: Oid = 20
    static let boolOid: Oid = 16
    static let float8Oid: Oid = 701
    static let textOid: Oid = 25
    static let byteaOid: Oid = 17
    static let uuidOid: Oid = 2950

    static func int(_ v: Int64) -> PGParam {
        PGParam(oid: int8Oid, bytes: withUnsafeBytes(of: v.bigEndian) { Array($0) })
    }

    static func float(_ v: Double) -> PGParam {
        PGParam(oid: float8Oid, bytes: withUnsafeBytes(of: v.bitPattern.bigEndian) { Array($0) })
    }

    static func text(_ s: String) -> PGParam {
        PGParam(oid: textOid, bytes: PGText.encode(s))
    }

    static func value(_ value: Value) -> PGParam {
        switch value {
        case .null: PGParam(oid: 0, bytes: nil)
        case .int(let v): .int(v)
        case .bool(let v): PGParam(oid: boolOid, bytes: [v ? 1 : 0])
        case .double(let v): .float(v)
        case .date(let v): .float(v.timeIntervalSinceReferenceDate)
        case .string(let s): .text(s)
        case .data(let d): PGParam(oid: byteaOid, bytes: Array(d))
        case .uuid(let u): PGParam(oid: uuidOid, bytes: withUnsafeBytes(of: u.uuid) { Array($0) })
        }
    }
}
