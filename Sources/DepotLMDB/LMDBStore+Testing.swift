package import DepotCore

// What Depot's own tests look at inside an LMDB store: package members, so the tests need
// no `@testable import`.
extension EngineStore where Engine == LMDBEngine {
    /// How many catalog changes were published: two per registration or rewrite (begun,
    /// then done), so an even count means none is half-published.
    package var catalogVersion: UInt64 { engine.catalog.version }

    /// The store's LMDB environment.
    package var environment: Environment { engine.environment }
}

extension EngineStore where Engine == LMDBEngine {
    /// The map size `size` opens with: rounded up to whole pages.
    package static func roundedMapSize(_ size: Int) -> Int { LMDBEngine.roundedMapSize(size) }
}

extension LMDBTransaction {
    /// The stored bytes of `entity`'s record with primary key `key`, when there is one.
    package func storedRecord(_ entity: EntityHandle, key: Value) throws(DepotError) -> [UInt8]? {
        var keyBytes: [UInt8] = []
        KeyEncoding.appendPrimaryKey(key, to: &keyBytes)
        guard let value = try get(handles(for: entity).main, keyBytes, context: "Reading a record for a test") else { return nil }
        return Array(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size))
    }

    /// Replaces the stored bytes of `entity`'s record with primary key `key` as they are,
    /// indexes untouched: how a test damages a record.
    package func replaceStoredRecord(_ entity: EntityHandle, key: Value, with bytes: [UInt8]) throws(DepotError) {
        var keyBytes: [UInt8] = []
        KeyEncoding.appendPrimaryKey(key, to: &keyBytes)
        try put(handles(for: entity).main, keyBytes, bytes, context: "Damaging a record for a test")
    }
}
