package import DepotCore
import Foundation

/// How both SQL engines keep an entity's description in their `depot_entities` table: as
/// JSON text, with sorted keys so that the same description is always the same text (a
/// rewrite that changes nothing leaves the row as it was).
package enum StoredDescription {
    /// The JSON text stored for `entity`.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` when the description cannot be encoded.
    package static func encode(_ entity: EntityDescription) throws(DepotError) -> String {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return String(decoding: try encoder.encode(entity), as: UTF8.self)
        } catch {
            throw DepotError(.invalidSchema, "The description of entity \(entity.name) cannot be encoded: \(error).")
        }
    }

    /// The description of entity `name` stored as the JSON text `json`, decoded and
    /// validated.
    ///
    /// - Parameters:
    ///   - json: The stored text's bytes, in UTF-8.
    ///   - location: The file or server, for the message; nil to leave it out.
    /// - Throws: ``DepotError/Code/storeCorrupted`` when the bytes are not a valid
    ///   description: the table was changed outside Depot, and nothing is trusted from it.
    package static func decode(utf8 json: UnsafeRawBufferPointer, of name: String, in location: String?) throws(DepotError) -> EntityDescription {
        try decode(Data(json), of: name, in: location)
    }

    /// The description of entity `name` stored in a text column read as `value`.
    package static func decode(_ value: Value, of name: String, in location: String?) throws(DepotError) -> EntityDescription {
        guard case .string(let json) = value else { throw corrupted(name, location) }
        return try decode(Data(json.utf8), of: name, in: location)
    }

    private static func decode(_ json: Data, of name: String, in location: String?) throws(DepotError) -> EntityDescription {
        guard let entity = try? JSONDecoder().decode(EntityDescription.self, from: json), (try? entity.validate()) != nil else {
            throw corrupted(name, location)
        }
        return entity
    }

    private static func corrupted(_ name: String, _ location: String?) -> DepotError {
        let place = location.map { " in \($0)" } ?? ""
        return DepotError(.storeCorrupted, "The stored description of entity \(name)\(place) cannot be read; the depot_entities table was changed outside Depot.")
    }
}
