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

/// A composite index database (an ``IndexDescription``): not `MDB_DUPSORT`; each key is the
/// components' tuple encoding (see ``KeyEncoding/appendTupleComponent(_:descending:to:)``)
/// followed by the primary key's, so entries of equal components sort by primary key and
/// every key is unique; each value is the primary key.
package struct CompositeHandle: Sendable, Equatable {
    package let description: IndexDescription
    /// The position of each component's attribute in the entity.
    package let positions: [Int]
    package let dbi: MDB_dbi

    package init(description: IndexDescription, positions: [Int], dbi: MDB_dbi) {
        self.description = description
        self.positions = positions
        self.dbi = dbi
    }

    var isUnique: Bool { description.isUnique }

    /// The handle of `index` of `entity`, or `nil` when a component names no attribute
    /// (a validated description never does).
    init?(_ index: IndexDescription, of entity: EntityDescription, dbi: MDB_dbi) {
        var positions: [Int] = []
        for component in index.components {
            guard let position = entity.index(of: component.attribute) else { return nil }
            positions.append(position)
        }
        self.init(description: index, positions: positions, dbi: dbi)
    }

    /// Appends the components of `row` (without the primary key) to `out`.
    @inline(__always)
    func appendComponents(of row: Row, to out: inout [UInt8]) {
        for (n, position) in positions.enumerated() {
            KeyEncoding.appendTupleComponent(row[value: position], descending: description.components[n].isDescending, to: &out)
        }
    }
}

/// A registered entity (every backend calls its per-entity state by this name): its open
/// databases. A class: every read resolves it, and handing out one reference is cheaper
/// than copying five arrays' worth of references.
package final class RegisteredEntity: Sendable {
    let entity: EntityDescription
    let main: MDB_dbi
    let indexes: [IndexHandle]
    /// The composite index databases, in the entity's declaration order.
    package let composites: [CompositeHandle]
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
    /// Plans remembered by query shape (see ``ReusablePlan``). They belong to these handles:
    /// a schema change makes new handles, and with them an empty cache.
    let planCache = Mutex<[PlanShape: ReusablePlan]>([:])

    package init(
        entity: EntityDescription, main: MDB_dbi, indexes: [IndexHandle], composites: [CompositeHandle] = [], schemaVersion: Int,
        stamp: [UInt8] = []
    ) {
        self.entity = entity
        self.main = main
        self.indexes = indexes
        self.composites = composites
        self.schemaVersion = schemaVersion
        self.types = entity.attributes.map(\.type)
        self.primaryKeyType = entity.primaryKey.type
        self.stamp = stamp
    }

    /// The same handles, stamped with the stored schema they belong to.
    func stamped(_ stamp: [UInt8]) -> RegisteredEntity {
        RegisteredEntity(
            entity: entity, main: main, indexes: indexes, composites: composites, schemaVersion: schemaVersion, stamp: stamp)
    }

    @inline(__always)
    package func index(at position: Int) -> IndexHandle? {
        for index in indexes where index.position == position { return index }
        return nil
    }
}
