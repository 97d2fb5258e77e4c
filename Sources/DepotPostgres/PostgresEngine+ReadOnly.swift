import DepotCore

// Opening read-only (`Options.readOnly`): the schema and Depot's tables must exist already.
extension PostgresEngine {
    /// Refuses a read-only open of a schema that is missing or lacks Depot's tables, before
    /// opening would create them.
    static func checkReadOnly(_ connection: PGConnection, options: Options, schemaExists: Bool) throws(DepotError) {
        guard schemaExists else {
            throw DepotError(.invalidConfiguration, "The PostgreSQL database has no schema \(options.schema), and a store opened read-only is never created. Check the URL's schema=.")
        }
        let tables = try connection.query(
            "SELECT count(*) = 2 FROM pg_tables WHERE schemaname = $1 AND tablename IN ('depot_meta', 'depot_entities')",
            [.text(options.schema)], "Looking up Depot's tables in \(options.schema)")
        guard tables.bool(0, 0) else {
            throw DepotError(.invalidConfiguration, "The PostgreSQL schema \(options.schema) holds no Depot store (no depot_meta and depot_entities tables), and a store opened read-only is never created. Check the URL's schema=.")
        }
    }
}
