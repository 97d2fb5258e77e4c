package import CLMDB
package import DepotCore
import Foundation
import Synchronization

/// An index database of one attribute: `MDB_DUPSORT`, index key → primary keys.
package struct IndexHandle: Sendable, Equatable {
    package let position: Int
    let dbi: MDB_dbi
    let isUnique: Bool

    package init(position: Int, dbi: MDB_dbi, isUnique: Bool) {
        self.position = position
        self.dbi = dbi
        self.isUnique = isUnique
    }
}

/// A registered entity (every backend calls its per-entity state by this name): its open
/// databases. A class: every read resolves it, and handing out one reference is cheaper
/// than copying five arrays' worth of references.
package final class RegisteredEntity: Sendable {
    let entity: EntityDescription
    let main: MDB_dbi
    let indexes: [IndexHandle]
    let schemaVersion: Int
    /// The attribute types in order, so decoding a record does not copy descriptions.
    let types: [AttributeType]
    /// The primary key's type, compared with every key looked up.
    let primaryKeyType: AttributeType
    /// The exact bytes of the entity's stored schema (`entity:<Name>` in `depot_meta`) these
    /// handles were made from. Another process that migrates the entity changes them; every
    /// transaction compares them before using the handles (see
    /// ``LMDBTransaction/handles(for:)``).
    let stamp: [UInt8]
    /// The newest read snapshot (`mdb_txn_id`) in which a transaction of this process found
    /// the stored schema equal to ``stamp``; 0 for none yet. A read transaction on the same
    /// snapshot sees the same bytes, so it skips the comparison: a lookup by key in a read
    /// of its own then costs one B-tree search, not two.
    let verifiedSnapshot = Atomic<UInt64>(0)

    package init(entity: EntityDescription, main: MDB_dbi, indexes: [IndexHandle], schemaVersion: Int, stamp: [UInt8] = []) {
        self.entity = entity
        self.main = main
        self.indexes = indexes
        self.schemaVersion = schemaVersion
        self.types = entity.attributes.map(\.type)
        self.primaryKeyType = entity.primaryKey.type
        self.stamp = stamp
    }

    /// The same handles, stamped with the stored schema they belong to.
    func stamped(_ stamp: [UInt8]) -> RegisteredEntity {
        RegisteredEntity(entity: entity, main: main, indexes: indexes, schemaVersion: schemaVersion, stamp: stamp)
    }

    @inline(__always)
    package func index(at position: Int) -> IndexHandle? {
        for index in indexes where index.position == position { return index }
        return nil
    }
}
