@testable import DepotLMDB
import DepotCore
import Foundation

/// The LMDB key encodings. LMDB keys are never decoded back into values (an index entry's
/// data is the primary key's bytes, looked up as they are), so what must hold is the order:
/// for two values of one type, `memcmp` order of their primary-key and index-key encodings
/// (shorter first on a common prefix, LMDB's default) equals `Value.compare`, equal values
/// have equal keys, and `successor(ofPrefix:)` bounds every key with that prefix.
enum KeyTarget {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        var input = FuzzInput(bytes)
        let type = input.type()
        let a = input.value(of: type)
        let b = input.bool() ? a : input.value(of: type)
        let order = Value.compare(a, b).signum()
        guard Value.compare(b, a).signum() == -order else { violated("compare(\(a.debugLiteral), \(b.debugLiteral)) is not antisymmetric") }

        let indexA = KeyEncoding.indexKey(a)
        let indexB = KeyEncoding.indexKey(b)
        guard memcmpOrder(indexA, indexB) == order else {
            violated("index keys of \(a.debugLiteral) and \(b.debugLiteral) order \(memcmpOrder(indexA, indexB)), values \(order)")
        }
        if !a.isNull && !b.isNull {
            let keyA = KeyEncoding.primaryKey(a)
            let keyB = KeyEncoding.primaryKey(b)
            guard memcmpOrder(keyA, keyB) == order else {
                violated("primary keys of \(a.debugLiteral) and \(b.debugLiteral) order \(memcmpOrder(keyA, keyB)), values \(order)")
            }
            guard !keyA.isEmpty else { violated("empty primary key for \(a.debugLiteral) (LMDB refuses empty keys)") }
        }

        // successor(ofPrefix:) on arbitrary bytes: greater than the prefix and every extension of it.
        let prefix = Array(indexA.prefix(input.choose(indexA.count + 1)))
        if let next = KeyEncoding.successor(ofPrefix: prefix) {
            guard memcmpOrder(prefix, next) < 0, memcmpOrder(indexA, next) < 0 else {
                violated("successor \(next) of \(prefix) does not bound \(indexA)")
            }
        } else if !prefix.allSatisfy({ $0 == 0xFF }) {
            violated("no successor for \(prefix)")
        }
        // The comparison the scans use against keys in the map.
        let c = LMDBTransaction.withVal(indexB) { LMDBTransaction.compare($0, indexA) }
        guard c == memcmpOrder(indexB, indexA) else { violated("LMDBTransaction.compare disagrees with memcmp on \(indexB), \(indexA)") }
    }

    static func memcmpOrder(_ a: [UInt8], _ b: [UInt8]) -> Int {
        for (x, y) in zip(a, b) where x != y { return x < y ? -1 : 1 }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }
}
